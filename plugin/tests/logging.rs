//! Logging through the backend's callback, with the level threshold. A separate test binary,
//! because the callback and level are process-wide.

mod common;

use std::ptr::null_mut;

use common::log_lines::{collect, take};
use common::*;

#[test]
fn lines_reach_the_callback_above_the_threshold_only() {
    let p = plugin();
    // SAFETY: valid arguments, or the NULL under test.
    unsafe {
        assert_eq!((p.SetLoggingCallback)(Some(collect)), SUCCESS);
        assert_eq!((p.SetLogLevel)(1), SUCCESS); // WARN
        take();
        let mut name = std::ptr::null();
        // An unknown engine id is an INFO-level decline: filtered out.
        assert_eq!((p.GetEngineName)(42, &mut name), NOT_APPLICABLE);
        // A NULL argument is an ERROR: delivered.
        assert_eq!((p.GetName)(null_mut()), BAD_PARAM);
        let lines = take();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].0, 2, "HIPDNN_SEV_ERROR");
        assert!(
            lines[0]
                .1
                .contains("hipdnnPluginGetName: argument `name` is NULL")
        );
        assert!(lines[0].1.starts_with("[hipdnn_provider_ragged_sdpa]"));

        assert_eq!((p.SetLogLevel)(0), SUCCESS); // INFO
        assert_eq!((p.GetEngineName)(42, &mut name), NOT_APPLICABLE);
        let lines = take();
        assert!(
            lines
                .iter()
                .any(|(sev, l)| *sev == 0 && l.contains("engine id 42")),
            "{lines:?}"
        );

        assert_eq!((p.SetLogLevel)(4), SUCCESS); // OFF
        assert_eq!((p.GetName)(null_mut()), BAD_PARAM);
        assert_eq!(take(), vec![]);
    }
}
