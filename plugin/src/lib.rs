//! The hipDNN engine-plugin C ABI around the ragged SDPA engines (issue 4).
