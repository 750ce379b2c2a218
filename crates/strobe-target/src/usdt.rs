//! USDT probes: the `.note.stapsdt` notes that `<sys/sdt.h>` (`DTRACE_PROBE*`, `STAP_PROBE*`)
//! leaves in an ELF file.
//!
//! Each note (owner `"stapsdt"`, type 3) describes one probe site: the address of the `nop`
//! the macro emitted, the link-time address of `.stapsdt.base` (to correct for prelink),
//! the address of the probe's semaphore (0 if none), then `provider\0name\0args\0`. A site
//! becomes a uprobe at the nop's file offset; a semaphore becomes the uprobe PMU's
//! `ref_ctr_offset`, which makes the kernel increment the counter while the probe is
//! attached so the program's `if (PROVIDER_NAME_ENABLED())` guard turns on.
//!
//! This module parses bytes; it never reads files.

/// One USDT probe site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtNote {
    /// Provider (the first `DTRACE_PROBE` argument).
    pub provider: String,
    /// Probe name.
    pub name: String,
    /// Link-time address of the probe's `nop` (corrected for prelink by the ELF reader).
    pub pc: u64,
    /// Link-time address of `.stapsdt.base` recorded in the note.
    pub base: u64,
    /// Link-time address of the semaphore, 0 when the probe has none.
    pub semaphore: u64,
    /// The argument description string (e.g. `-4@%edi 8@%rsi`).
    pub args: String,
    /// File offset of the probe site (filled by the ELF reader).
    pub file_offset: Option<u64>,
    /// File offset of the semaphore (filled by the ELF reader), the uprobe's
    /// `ref_ctr_offset`.
    pub semaphore_offset: Option<u64>,
}

impl UsdtNote {
    /// `provider:name`, as strobe prints and accepts it (after `usdt:`).
    pub fn qualified_name(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }
}

const NT_STAPSDT: u32 = 3;

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// Parses the bytes of a `.note.stapsdt` section of a 64-bit ELF file. Notes of other
/// owners or types are skipped. Errors describe the first malformed note.
pub fn parse_notes(bytes: &[u8], little_endian: bool) -> Result<Vec<UsdtNote>, String> {
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if little_endian { u32::from_le_bytes(a) } else { u32::from_be_bytes(a) })
    };
    let u64_at = |b: &[u8], at: usize| -> Option<u64> {
        let a: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        Some(if little_endian { u64::from_le_bytes(a) } else { u64::from_be_bytes(a) })
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 12 <= bytes.len() {
        let namesz = u32_at(bytes, at).ok_or("truncated note header")? as usize;
        let descsz = u32_at(bytes, at + 4).ok_or("truncated note header")? as usize;
        let kind = u32_at(bytes, at + 8).ok_or("truncated note header")?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align4(namesz).ok_or("note too large")?).ok_or("bad")?;
        let next = desc_at.checked_add(align4(descsz).ok_or("note too large")?).ok_or("bad")?;
        if desc_at + descsz > bytes.len() {
            return Err(format!("note at byte {at} runs past the end of the section"));
        }
        let owner = &bytes[name_at..name_at + namesz];
        if kind == NT_STAPSDT && owner.strip_suffix(b"\0").unwrap_or(owner) == b"stapsdt" {
            let desc = &bytes[desc_at..desc_at + descsz];
            let pc = u64_at(desc, 0).ok_or("note descriptor shorter than 24 bytes")?;
            let base = u64_at(desc, 8).ok_or("note descriptor shorter than 24 bytes")?;
            let semaphore = u64_at(desc, 16).ok_or("note descriptor shorter than 24 bytes")?;
            let mut strings = desc[24..].split(|&b| b == 0);
            let mut take = |what: &str| -> Result<String, String> {
                strings
                    .next()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .ok_or_else(|| format!("note at byte {at} lacks its {what}"))
            };
            let provider = take("provider")?;
            let name = take("name")?;
            let args = take("arguments").unwrap_or_default();
            if provider.is_empty() || name.is_empty() {
                return Err(format!("note at byte {at} has an empty provider or name"));
            }
            out.push(UsdtNote {
                provider,
                name,
                pc,
                base,
                semaphore,
                args,
                file_offset: None,
                semaphore_offset: None,
            });
        }
        at = next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(owner: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(owner.len() as u32).to_le_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(owner);
        v.resize(align4(v.len()).unwrap(), 0);
        v.extend_from_slice(desc);
        v.resize(align4(v.len()).unwrap(), 0);
        v
    }

    fn desc(pc: u64, base: u64, sema: u64, strings: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        for w in [pc, base, sema] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(strings);
        d
    }

    #[test]
    fn parses_stapsdt_notes_and_skips_others() {
        let mut bytes = note(b"GNU\0", 3, &[0; 20]);
        bytes.extend(note(b"stapsdt\0", 3, &desc(0x1139, 0x2004, 0, b"app\0tick\0-4@%edi\0")));
        bytes.extend(note(b"stapsdt\0", 3, &desc(0x1200, 0x2004, 0x4010, b"app\0tock\0\0")));
        let notes = parse_notes(&bytes, true).unwrap();
        assert_eq!(notes.len(), 2);
        assert_eq!(notes[0].qualified_name(), "app:tick");
        assert_eq!((notes[0].pc, notes[0].base, notes[0].semaphore), (0x1139, 0x2004, 0));
        assert_eq!(notes[0].args, "-4@%edi");
        assert_eq!(notes[1].semaphore, 0x4010);
        assert_eq!(notes[1].args, "");
    }

    #[test]
    fn malformed_notes_are_errors_not_panics() {
        let mut bytes = note(b"stapsdt\0", 3, &desc(1, 2, 3, b"app\0tick\0\0"));
        bytes.truncate(bytes.len() - 12);
        assert!(parse_notes(&bytes, true).is_err());
        let short = note(b"stapsdt\0", 3, &[0; 10]);
        assert!(parse_notes(&short, true).is_err());
        assert!(parse_notes(&[], true).unwrap().is_empty());
    }
}
