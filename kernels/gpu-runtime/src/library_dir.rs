//! The folder the library holding this code was loaded from: the AITER shim is looked for next to
//! the plugin (kernels/aiter-fmha/shim/README.md), because hipDNN installs plugins as a folder of
//! `.so` files.
//!
//! `/proc/self/maps` names the file mapped at each address range, so the range holding one of
//! this library's own functions names the plugin, with no `dladdr` (and no libc binding) needed.

use std::path::{Path, PathBuf};

/// The plugin's folder, or `None` where `/proc` is unavailable (the search then relies on
/// `$RAGGED_SDPA_AITER_SHIM`).
pub fn plugin_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let address = plugin_dir as fn() -> Option<PathBuf> as usize;
    mapped_file(&maps, address).and_then(|file| file.parent().map(Path::to_path_buf))
}

/// The file mapped at `address` in a `/proc/<pid>/maps` text.
fn mapped_file(maps: &str, address: usize) -> Option<PathBuf> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        if !(start..end).contains(&address) {
            return None;
        }
        // perms, offset, dev, inode, then the path (which may contain spaces).
        let path = fields.skip(4).collect::<Vec<_>>().join(" ");
        path.starts_with('/').then(|| PathBuf::from(path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_holding_the_address_names_the_file() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 42 /usr/bin/host
7f0000000000-7f0000100000 r-xp 00001000 08:01 43 /opt/hip dnn/libhipdnn_provider_ragged_sdpa.so
7f0000200000-7f0000201000 rw-p 00000000 00:00 0 
";
        assert_eq!(
            mapped_file(maps, 0x7f00_0000_8000),
            Some(PathBuf::from(
                "/opt/hip dnn/libhipdnn_provider_ragged_sdpa.so"
            ))
        );
        assert_eq!(mapped_file(maps, 0x7f00_0020_0010), None, "anonymous");
        assert_eq!(mapped_file(maps, 0x1000), None, "unmapped");
    }

    #[test]
    fn this_test_binary_is_found() {
        let dir = plugin_dir();
        let exe = std::env::current_exe().ok();
        let exe_dir = exe.as_deref().and_then(Path::parent).map(Path::to_path_buf);
        assert!(dir.is_some());
        assert_eq!(dir, exe_dir);
    }
}
