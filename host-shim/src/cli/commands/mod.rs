//! One module per subcommand.

pub mod bench;
pub mod bundle;
pub mod inspect;
pub mod plugins;
pub mod run;
