//! The panic boundary every export runs inside.
//!
//! Unwinding out of an `extern "C"` function aborts the process (Rust ≥ 1.81); aborting the C++
//! host that loaded us is not acceptable, so each export catches panics (the library is built with
//! `panic = "unwind"`), records a last-error text and returns the panic value of its return type.
//! The error → message → log step also lives here, so that every failing export reports the same
//! way: `<function>: <cause>`.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::last_error;
use crate::abi::types::{Severity, Status};
use crate::error::PluginError;
use crate::logging;

/// What an export body returns, and what C sees on success, on error and on panic.
///
/// Like rustls-ffi's `PanicOrDefault`, but the body's own error path goes through the same trait,
/// so the status conversion happens in exactly one place.
pub trait BoundaryOutcome {
    type C;
    fn into_c(self, function: &'static str) -> Self::C;
    fn on_panic(function: &'static str, message: &str) -> Self::C;
}

impl BoundaryOutcome for Result<(), PluginError> {
    type C = Status;

    fn into_c(self, function: &'static str) -> Status {
        match self {
            Ok(()) => Status::SUCCESS,
            Err(error) => report(function, &error),
        }
    }

    fn on_panic(function: &'static str, message: &str) -> Status {
        report(function, &PluginError::Panic(message.to_owned()))
    }
}

/// For `hipdnnPluginGetLastErrorString`, which returns nothing and cannot report anything.
impl BoundaryOutcome for () {
    type C = ();

    fn into_c(self, _function: &'static str) {}

    fn on_panic(_function: &'static str, _message: &str) {}
}

/// Runs `body`, turning its outcome or its panic into the C return value.
///
/// `AssertUnwindSafe` is sound here because no state a body can leave half-updated survives a
/// panic: registries and handles sit behind `parking_lot` locks whose guards release on unwind,
/// and outputs are written only as the body's last step.
///
/// Log lines the call writes, its own failure report included, reach the host's callback after
/// the body has ended (see `logging.rs`), so a callback may call any export, this one included.
pub fn ffi_boundary<R: BoundaryOutcome>(function: &'static str, body: impl FnOnce() -> R) -> R::C {
    logging::enter();
    let c = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(outcome) => outcome.into_c(function),
        Err(payload) => R::on_panic(function, &panic_message(payload.as_ref())),
    };
    logging::leave();
    c
}

/// Records the failure for this thread and logs it; returns its status.
fn report(function: &'static str, error: &PluginError) -> Status {
    let status = error.status();
    let message = format!("{function}: {error}");
    last_error::set(&message);
    // A decline in GetEngineName is part of the protocol, not a fault.
    let severity = if status == Status::NOT_APPLICABLE {
        Severity::INFO
    } else {
        Severity::ERROR
    };
    logging::log(severity, || format!("{message} ({})", status.name()));
    status
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-text payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_status_zero() {
        let status = ffi_boundary("hipdnnTestOk", || -> Result<(), PluginError> { Ok(()) });
        assert_eq!(status, Status::SUCCESS);
    }

    #[test]
    fn an_error_becomes_its_status_and_a_named_message() {
        let status = ffi_boundary("hipdnnTestNull", || -> Result<(), PluginError> {
            Err(PluginError::NullArgument { argument: "name" })
        });
        assert_eq!(status, Status::BAD_PARAM);
        assert_eq!(
            last_error::current(),
            "hipdnnTestNull: argument `name` is NULL"
        );
    }

    #[test]
    fn a_panic_becomes_internal_error_with_its_text() {
        let status = ffi_boundary("hipdnnTestPanic", || -> Result<(), PluginError> {
            panic!("boom {}", 42)
        });
        assert_eq!(status, Status::INTERNAL_ERROR);
        assert_eq!(
            last_error::current(),
            "hipdnnTestPanic: internal panic: boom 42"
        );
    }

    #[test]
    fn a_panic_in_a_void_export_is_swallowed() {
        let body = || -> () { panic!("static text") };
        ffi_boundary("hipdnnTestVoid", body);
    }
}
