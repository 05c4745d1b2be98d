//! The defined, globally visible symbols of an ELF64 little-endian shared object (what
//! `nm -gD --defined-only` prints), read straight from `.dynsym`. The ABI suite uses it for the
//! hygiene rule of plugin-abi.md §2: a plugin exports the plugin-API functions and nothing else.

use std::path::Path;

use crate::host_error::HostError;

const SHT_DYNSYM: u32 = 11;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;
const SHN_UNDEF: u16 = 0;

// Every offset below comes from the file, so each `base + field` is checked: a crafted header
// must make the parse fail, not overflow.

fn bytes_at<const N: usize>(b: &[u8], base: usize, field: usize) -> Option<[u8; N]> {
    let at = base.checked_add(field)?;
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u8_at(b: &[u8], base: usize, field: usize) -> Option<u8> {
    bytes_at::<1>(b, base, field).map(|[v]| v)
}

fn u16_at(b: &[u8], base: usize, field: usize) -> Option<u16> {
    bytes_at(b, base, field).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], base: usize, field: usize) -> Option<u32> {
    bytes_at(b, base, field).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], base: usize, field: usize) -> Option<usize> {
    usize::try_from(bytes_at(b, base, field).map(u64::from_le_bytes)?).ok()
}

/// Names of defined GLOBAL or WEAK dynamic symbols, sorted.
pub fn exported_symbols(path: &Path) -> Result<Vec<String>, HostError> {
    let bytes = std::fs::read(path).map_err(|source| HostError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).ok_or_else(|| {
        HostError::Harness(format!(
            "'{}' is not a well-formed ELF64 little-endian shared object",
            path.display()
        ))
    })
}

fn parse(b: &[u8]) -> Option<Vec<String>> {
    // e_ident: magic, class 2 (64-bit), data 1 (little-endian).
    if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let shoff = u64_at(b, 0, 0x28)?;
    let shentsize = usize::from(u16_at(b, 0, 0x3a)?);
    let shnum = usize::from(u16_at(b, 0, 0x3c)?);
    let section = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let mut names = Vec::new();
    for i in 0..shnum {
        let sh = section(i)?;
        if u32_at(b, sh, 4)? != SHT_DYNSYM {
            continue;
        }
        let (sym_off, sym_size) = (u64_at(b, sh, 0x18)?, u64_at(b, sh, 0x20)?);
        let link = usize::try_from(u32_at(b, sh, 0x28)?).ok()?;
        let entsize = u64_at(b, sh, 0x38)?.max(24);
        let strtab = section(link)?;
        let str_off = u64_at(b, strtab, 0x18)?;
        for k in 0..sym_size / entsize {
            let s = sym_off.checked_add(k.checked_mul(entsize)?)?;
            let name_off = usize::try_from(u32_at(b, s, 0)?).ok()?;
            let binding = u8_at(b, s, 4)? >> 4;
            let shndx = u16_at(b, s, 6)?;
            if shndx == SHN_UNDEF || !(binding == STB_GLOBAL || binding == STB_WEAK) {
                continue;
            }
            let start = str_off.checked_add(name_off)?;
            let len = b.get(start..)?.iter().position(|c| *c == 0)?;
            let name = String::from_utf8_lossy(&b[start..start + len]).into_owned();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names.sort();
    names.dedup();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf_input() {
        assert_eq!(parse(b"not an elf file at all"), None);
    }

    /// An ELF64 LE header whose section table starts at `shoff`, with one 64-byte entry.
    fn header_with_section_table_at(shoff: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        b[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
        b
    }

    #[test]
    fn offsets_near_the_address_limit_fail_the_parse_instead_of_overflowing() {
        assert_eq!(parse(&header_with_section_table_at(u64::MAX - 1)), None);
        assert_eq!(parse(&header_with_section_table_at(u64::MAX - 0x1f)), None);
    }

    #[test]
    fn a_dynamic_symbol_table_pointing_past_the_address_limit_fails_the_parse() {
        // Section 0 is .dynsym (type 11) with its symbols at the very end of the address space.
        let mut b = header_with_section_table_at(64);
        b.resize(128, 0);
        b[64 + 4..64 + 8].copy_from_slice(&11u32.to_le_bytes());
        b[64 + 0x18..64 + 0x20].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        b[64 + 0x20..64 + 0x28].copy_from_slice(&48u64.to_le_bytes());
        assert_eq!(parse(&b), None);
    }

    #[test]
    fn reads_the_defined_global_symbols_of_a_minimal_table() {
        let mut b = header_with_section_table_at(64);
        b[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        b.resize(288, 0);
        // Section 0 (64..128): .dynsym at 192, three 24-byte entries (null symbol first), link 1.
        b[64 + 4..64 + 8].copy_from_slice(&11u32.to_le_bytes());
        b[64 + 0x18..64 + 0x20].copy_from_slice(&192u64.to_le_bytes());
        b[64 + 0x20..64 + 0x28].copy_from_slice(&72u64.to_le_bytes());
        b[64 + 0x28..64 + 0x2c].copy_from_slice(&1u32.to_le_bytes());
        // Section 1 (128..192): the string table at 272, "\0f\0u\0".
        b[128 + 0x18..128 + 0x20].copy_from_slice(&272u64.to_le_bytes());
        b[272..276].copy_from_slice(b"\0f\0u");
        // Symbol 1 (216): "f", GLOBAL, defined in section 5. Symbol 2 (240): "u", undefined.
        b[216..220].copy_from_slice(&1u32.to_le_bytes());
        b[220] = STB_GLOBAL << 4;
        b[222..224].copy_from_slice(&5u16.to_le_bytes());
        b[240..244].copy_from_slice(&3u32.to_le_bytes());
        b[244] = STB_GLOBAL << 4;
        assert_eq!(parse(&b), Some(vec!["f".to_owned()]));
    }
}
