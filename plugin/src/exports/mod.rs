//! The exported C entry points: base functions and engine functions. Function names follow
//! hipDNN's C spelling, hence the lint allowance.

#![allow(non_snake_case)]

pub mod base;
pub mod engine;
pub mod overrides;
pub mod serialization;
