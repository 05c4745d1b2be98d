//! The byte format of a serialized execution context (RFC 0009, compiled-plan serialization).
//!
//! The bytes are opaque to hipDNN but must survive a trip through a file, another process or a
//! cache: they carry what rebuilding needs (the engine id and the graph bytes, from which the
//! context is rebuilt through the same checks as `CreateExecutionContext`) and a header that
//! lets foreign, truncated or damaged bytes be told apart, each with its own message. Plans are
//! not stored: they are rebuilt from the graph, so bytes stay valid across devices of the same
//! engine and a recreated context is the original one by construction.
//!
//! Layout, all integers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `RSDPACTX` |
//! | 4 | format version ([`FORMAT_VERSION`]) |
//! | 2 + n | plugin version (`u16` length, UTF-8) |
//! | 8 | engine id (`i64`) |
//! | 8 + m | graph bytes (`u64` length) |
//! | 8 | FNV-1a-64 of every byte before it |

use crate::error::PluginError;

pub const MAGIC: [u8; 8] = *b"RSDPACTX";
/// Bumped on any layout change; bytes of another format version are declined, never guessed.
pub const FORMAT_VERSION: u32 = 1;

/// What a serialized context holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedContext<'a> {
    pub plugin_version: &'a str,
    pub engine_id: i64,
    pub graph: &'a [u8],
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn damaged(detail: String) -> PluginError {
    PluginError::Malformed {
        what: "serialized_context",
        detail,
    }
}

/// The bytes for `context`.
pub fn encode(context: &SerializedContext<'_>) -> Vec<u8> {
    let version = context.plugin_version.as_bytes();
    let version_len = u16::try_from(version.len()).unwrap_or(u16::MAX);
    let version = &version[..usize::from(version_len)];
    let mut out = Vec::with_capacity(46 + version.len() + context.graph.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&version_len.to_le_bytes());
    out.extend_from_slice(version);
    out.extend_from_slice(&context.engine_id.to_le_bytes());
    out.extend_from_slice(&(context.graph.len() as u64).to_le_bytes());
    out.extend_from_slice(context.graph);
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A cursor that names the field a short buffer ran out in.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], PluginError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(damaged(format!(
                "truncated: {} bytes end inside the {field} (needs {n} bytes at offset {})",
                self.bytes.len(),
                self.at
            )));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], PluginError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }
}

/// Checks the header and checksum of `bytes`; `expected_version` is this plugin's version,
/// and bytes written by any other are declined naming the version that wrote them.
pub fn decode<'a>(
    bytes: &'a [u8],
    expected_version: &str,
) -> Result<SerializedContext<'a>, PluginError> {
    let mut r = Reader { bytes, at: 0 };
    let magic = r.array::<8>("magic")?;
    if magic != MAGIC {
        return Err(damaged(format!(
            "not a serialized execution context of this plugin: magic {magic:02x?}, expected \
             \"RSDPACTX\""
        )));
    }
    let format = u32::from_le_bytes(r.array("format version")?);
    if format != FORMAT_VERSION {
        return Err(damaged(format!(
            "format version {format}; this plugin reads format version {FORMAT_VERSION}"
        )));
    }
    // The checksum covers everything below, so damage is reported as damage, not as whatever
    // field it happened to hit.
    let Some(body_len) = bytes.len().checked_sub(8) else {
        return Err(damaged(format!("truncated: {} bytes", bytes.len())));
    };
    let (body, stored) = bytes.split_at(body_len);
    let mut sum = [0; 8];
    sum.copy_from_slice(stored);
    let (stored, computed) = (u64::from_le_bytes(sum), checksum(body));
    if stored != computed {
        return Err(damaged(format!(
            "checksum mismatch over {body_len} bytes: stored {stored:#018x}, computed \
             {computed:#018x} (the bytes are damaged or truncated)"
        )));
    }
    r.bytes = body;
    let version_len = u16::from_le_bytes(r.array("plugin version length")?);
    let version = r.take(usize::from(version_len), "plugin version")?;
    let Ok(plugin_version) = std::str::from_utf8(version) else {
        return Err(damaged(format!(
            "plugin version bytes {version:02x?} are not UTF-8"
        )));
    };
    if plugin_version != expected_version {
        return Err(damaged(format!(
            "written by plugin version {plugin_version}; this is version {expected_version}, \
             which only reads its own contexts"
        )));
    }
    let engine_id = i64::from_le_bytes(r.array("engine id")?);
    let graph_len = u64::from_le_bytes(r.array("graph length")?);
    let graph_len = usize::try_from(graph_len)
        .map_err(|_| damaged(format!("graph length {graph_len} does not fit in memory")))?;
    let graph = r.take(graph_len, "graph bytes")?;
    if r.at != body.len() {
        return Err(damaged(format!(
            "{} bytes follow the graph before the checksum",
            body.len() - r.at
        )));
    }
    Ok(SerializedContext {
        plugin_version,
        engine_id,
        graph,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: SerializedContext<'static> = SerializedContext {
        plugin_version: "0.1.0",
        engine_id: 8202884889727546333,
        graph: b"graph bytes",
    };

    fn error(bytes: &[u8], version: &str) -> String {
        match decode(bytes, version) {
            Ok(c) => panic!("decoded {c:?}"),
            Err(e) => {
                assert_eq!(e.status(), crate::abi::types::Status::BAD_PARAM, "{e}");
                e.to_string()
            }
        }
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let bytes = encode(&SAMPLE);
        assert_eq!(&bytes[..8], b"RSDPACTX");
        assert_eq!(decode(&bytes, "0.1.0").ok(), Some(SAMPLE));
    }

    #[test]
    fn foreign_bytes_are_named_by_their_magic() {
        let text = error(b"\x10\0\0\0FBUFgraph-or-whatever-else", "0.1.0");
        assert!(
            text.starts_with("malformed serialized_context: not a serialized"),
            "{text}"
        );
        let text = error(b"RSD", "0.1.0");
        assert!(
            text.contains("truncated") && text.contains("magic"),
            "{text}"
        );
    }

    #[test]
    fn every_flipped_byte_after_the_format_version_fails_the_checksum() {
        let bytes = encode(&SAMPLE);
        for i in 12..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            let text = error(&damaged, "0.1.0");
            assert!(text.contains("checksum mismatch"), "byte {i}: {text}");
        }
        let text = error(&bytes[..bytes.len() - 3], "0.1.0");
        assert!(text.contains("checksum mismatch"), "{text}");
    }

    #[test]
    fn other_format_and_plugin_versions_are_declined_by_name() {
        let mut bytes = encode(&SAMPLE);
        bytes[8] = 2;
        let text = error(&bytes, "0.1.0");
        assert!(text.contains("format version 2"), "{text}");
        let bytes = encode(&SAMPLE);
        let text = error(&bytes, "0.2.0");
        assert!(
            text.contains("written by plugin version 0.1.0; this is version 0.2.0"),
            "{text}"
        );
    }
}
