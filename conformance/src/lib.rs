//! Conformance harness and suites for hipDNN engine plugins (issue 5).
