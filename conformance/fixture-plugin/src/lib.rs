//! Test-only engine plugin with a configurable API version (issue 5 fills this in).
