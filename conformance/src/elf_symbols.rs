//! The defined, globally visible symbols of an ELF64 little-endian shared object (what
//! `nm -gD --defined-only` prints), read straight from `.dynsym`. The ABI suite uses it for the
//! hygiene rule of plugin-abi.md §2: a plugin exports the plugin-API functions and nothing else.

use std::path::Path;

use crate::error::ConformanceError;

const SHT_DYNSYM: u32 = 11;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;
const SHN_UNDEF: u16 = 0;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)).ok()
}

/// Names of defined GLOBAL or WEAK dynamic symbols, sorted.
pub fn exported_symbols(path: &Path) -> Result<Vec<String>, ConformanceError> {
    let bytes = std::fs::read(path).map_err(|source| ConformanceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).ok_or_else(|| {
        ConformanceError::Harness(format!(
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
    let shoff = u64_at(b, 0x28)?;
    let shentsize = usize::from(u16_at(b, 0x3a)?);
    let shnum = usize::from(u16_at(b, 0x3c)?);
    let section = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let mut names = Vec::new();
    for i in 0..shnum {
        let sh = section(i)?;
        if u32_at(b, sh + 4)? != SHT_DYNSYM {
            continue;
        }
        let (sym_off, sym_size) = (u64_at(b, sh + 0x18)?, u64_at(b, sh + 0x20)?);
        let link = usize::try_from(u32_at(b, sh + 0x28)?).ok()?;
        let entsize = u64_at(b, sh + 0x38)?.max(24);
        let strtab = section(link)?;
        let str_off = u64_at(b, strtab + 0x18)?;
        for s in (0..sym_size / entsize).map(|k| sym_off + k * entsize) {
            let name_off = usize::try_from(u32_at(b, s)?).ok()?;
            let binding = b.get(s + 4)? >> 4;
            let shndx = u16_at(b, s + 6)?;
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
}
