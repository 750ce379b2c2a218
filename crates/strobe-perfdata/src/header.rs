//! The parts of a perf.data around its records: the file header and its sections (file
//! mode), the attrs with their ids, and the feature sections strobe uses (event names,
//! perf's command line, groups, host facts). In pipe mode the same facts arrive as
//! records (HEADER_ATTR, HEADER_FEATURE, EVENT_UPDATE), which the reader collects here
//! in one pass over the record headers.
//!
//! Every count and size read here is checked against the bytes present before it is
//! used; nothing is preallocated from a count the file claims.
//!
//! This module must never decode samples.

use crate::abi::*;
use crate::attr::Attr;
use crate::bytes::{u16_at, u32_at, u64_at, until_nul, words, Cursor};
use crate::Error;

/// An attr of the file with what perf knows about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventAttr {
    /// The attr.
    pub attr: Attr,
    /// Its name as perf prints it (`task-clock:u`, `cycles`), from the EVENT_DESC
    /// feature (or EVENT_UPDATE in pipe mode); derived from type and config if absent.
    pub name: String,
    /// The ids of its kernel events (one per CPU or thread it was opened on).
    pub ids: Vec<u64>,
}

/// A group of events (the GROUP_DESC feature): `attrs[leader..leader + members]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDesc {
    /// The group's name, if it was given one (`-e '{a,b}:S'` groups are anonymous).
    pub name: Option<String>,
    /// Index of the leader's attr.
    pub leader: usize,
    /// Number of events in the group, leader included.
    pub members: usize,
}

/// A file's build id, from the BUILD_ID feature (perf records those of the files that
/// have samples, and keeps a copy of each in its build-id cache, `~/.debug`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildId {
    /// The process (-1 for the kernel's files).
    pub pid: i32,
    /// The build id bytes (usually 20).
    pub id: Vec<u8>,
    /// The file's path (or pseudo name, `[vdso]`, `[kernel.kallsyms]`).
    pub path: String,
}

impl BuildId {
    /// The id in lowercase hex, as perf's cache names it.
    pub fn hex(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What the feature sections tell about the recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileInfo {
    /// perf's own command line (`perf record -e ... -- prog args`), from CMDLINE.
    pub command: Vec<String>,
    /// `uname -n` of the recording machine.
    pub hostname: Option<String>,
    /// `uname -r` of the recording machine.
    pub os_release: Option<String>,
    /// The perf tool's version.
    pub perf_version: Option<String>,
    /// `uname -m` of the recording machine.
    pub arch: Option<String>,
    /// The event groups (GROUP_DESC).
    pub groups: Vec<GroupDesc>,
    /// Build ids of the files with samples (BUILD_ID).
    pub build_ids: Vec<BuildId>,
}

/// A `perf_header_string`: a u32 length, then that many bytes, NUL-padded.
fn header_string(c: &mut Cursor<'_>) -> Option<String> {
    let len = usize::try_from(c.u32()?).ok()?;
    Some(String::from_utf8_lossy(until_nul(c.take(len)?)).into_owned())
}

/// A name given to an attr by a feature section.
#[derive(Debug)]
pub(crate) struct Desc {
    pub attr: Attr,
    pub name: String,
    pub ids: Vec<u64>,
}

/// Parses EVENT_DESC: u32 count, u32 attr size, then per event the attr, a u32 id
/// count, the name and the ids. Stops quietly at the first entry that does not fit.
pub(crate) fn event_desc(b: &[u8]) -> Vec<Desc> {
    let mut c = Cursor::new(b);
    let (Some(nr), Some(attr_size)) = (c.u32(), c.u32()) else { return Vec::new() };
    let mut out = Vec::new();
    for _ in 0..nr {
        let Some(attr) = usize::try_from(attr_size).ok().and_then(|n| c.take(n)) else { break };
        let Some(nr_ids) = c.u32() else { break };
        let Some(name) = header_string(&mut c) else { break };
        let Some(ids) = c.take_words(u64::from(nr_ids)) else { break };
        out.push(Desc { attr: Attr::parse(attr), name, ids: words(ids).collect() });
    }
    out
}

/// Parses CMDLINE: u32 count, then that many strings.
fn cmdline(b: &[u8]) -> Vec<String> {
    let mut c = Cursor::new(b);
    let Some(nr) = c.u32() else { return Vec::new() };
    (0..nr).map_while(|_| header_string(&mut c)).collect()
}

/// Parses GROUP_DESC: u32 count, then per group its name, leader index and size.
fn group_desc(b: &[u8]) -> Vec<GroupDesc> {
    let mut c = Cursor::new(b);
    let Some(nr) = c.u32() else { return Vec::new() };
    (0..nr)
        .map_while(|_| {
            let name = header_string(&mut c)?;
            let leader = usize::try_from(c.u32()?).ok()?;
            let members = usize::try_from(c.u32()?).ok()?;
            Some(GroupDesc {
                name: (!name.is_empty() && name != "{anon_group}").then_some(name),
                leader,
                members,
            })
        })
        .collect()
}

/// Parses BUILD_ID: entries of a record header (whose size frames the entry), a pid, 24
/// bytes of build id (20 of id, then its size when `MISC_BUILD_ID_SIZE`), a path.
fn build_ids(b: &[u8]) -> Vec<BuildId> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let (Some(misc), Some(size)) = (u16_at(b, pos + 4), u16_at(b, pos + 6)) {
        let size = usize::from(size);
        let Some(entry) = b.get(pos..pos + size).filter(|_| size >= 36) else { break };
        let id = entry.get(12..32).unwrap_or(&[]);
        let len = if misc & MISC_BUILD_ID_SIZE != 0 {
            entry.get(32).map_or(20, |&n| usize::from(n).min(20))
        } else {
            20
        };
        out.push(BuildId {
            pid: u32_at(entry, 8).unwrap_or(0) as i32,
            id: id.get(..len).unwrap_or(id).to_vec(),
            path: String::from_utf8_lossy(until_nul(entry.get(36..).unwrap_or(&[]))).into_owned(),
        });
        pos += size;
    }
    out
}

/// Collects feature sections into `info` and `descs`.
#[derive(Debug, Default)]
pub(crate) struct Features {
    pub info: FileInfo,
    pub descs: Vec<Desc>,
    /// Byte offset of a COMPRESSED feature, if the file has one.
    pub compressed_at: Option<u64>,
}

impl Features {
    pub(crate) fn add(&mut self, feature: u32, b: &[u8], offset: u64) {
        let string = || header_string(&mut Cursor::new(b));
        match feature {
            FEAT_HOSTNAME => self.info.hostname = string(),
            FEAT_OSRELEASE => self.info.os_release = string(),
            FEAT_VERSION => self.info.perf_version = string(),
            FEAT_ARCH => self.info.arch = string(),
            FEAT_CMDLINE => self.info.command = cmdline(b),
            FEAT_EVENT_DESC => self.descs = event_desc(b),
            FEAT_GROUP_DESC => self.info.groups = group_desc(b),
            FEAT_BUILD_ID => self.info.build_ids = build_ids(b),
            FEAT_COMPRESSED => self.compressed_at = Some(offset),
            _ => {}
        }
    }
}

/// A `perf_file_section`: offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Section {
    pub offset: u64,
    pub size: u64,
}

impl Section {
    pub(crate) fn at(b: &[u8], at: usize) -> Option<Section> {
        Some(Section { offset: u64_at(b, at)?, size: u64_at(b, at + 8)? })
    }

    /// The section's bytes, or a truncation error naming `what`.
    pub(crate) fn slice<'a>(&self, b: &'a [u8], what: &'static str) -> Result<&'a [u8], Error> {
        let end = self.offset.checked_add(self.size).ok_or_else(|| {
            Error::corrupt(self.offset, format!("{what}: size {} overflows", self.size))
        })?;
        let range = usize::try_from(self.offset).ok().zip(usize::try_from(end).ok());
        match range.and_then(|(s, e)| b.get(s..e)) {
            Some(s) => Ok(s),
            None => Err(Error::Truncated {
                offset: self.offset,
                what,
                need: self.size,
                end: b.len() as u64,
            }),
        }
    }
}

/// The file-mode header's facts.
#[derive(Debug)]
pub(crate) struct FileHeader {
    pub attrs: Vec<EventAttr>,
    pub data: Section,
    pub features: Features,
    /// Set when the feature table or a feature section lies past the end of the file.
    pub features_cut_at: Option<u64>,
}

/// Most bytes an attr entry may have: `perf_event_attr` is 136 bytes today; allow
/// growth, refuse garbage.
const MAX_ATTR_SIZE: u64 = 4096;

/// Parses a file-mode header (magic already checked).
pub(crate) fn file_header(b: &[u8]) -> Result<FileHeader, Error> {
    if (b.len() as u64) < FILE_HEADER_SIZE {
        return Err(Error::Truncated {
            offset: 0,
            what: "the file header",
            need: FILE_HEADER_SIZE,
            end: b.len() as u64,
        });
    }
    let q = |at| u64_at(b, at).unwrap_or(0);
    let attr_size = q(16);
    let attr_section = Section::at(b, 24).unwrap_or(Section { offset: 0, size: 0 });
    let data = Section::at(b, 40).unwrap_or(Section { offset: 0, size: 0 });
    if attr_size <= 16 || attr_size > MAX_ATTR_SIZE {
        return Err(Error::corrupt(16, format!("attr entry size {attr_size} is not plausible")));
    }
    let attr_bytes = attr_section.slice(b, "the attr section")?;
    let mut attrs = Vec::new();
    // attr_size fits usize (checked above).
    for entry in attr_bytes.chunks_exact(attr_size as usize) {
        let split = entry.len() - 16;
        let (attr, ids) = entry.split_at(split);
        let ids_section = Section::at(ids, 0).unwrap_or(Section { offset: 0, size: 0 });
        let ids = ids_section.slice(b, "an attr's id list")?;
        let attr = Attr::parse(attr);
        attrs.push(EventAttr { attr, name: attr.default_name(), ids: words(ids).collect() });
    }
    if attrs.is_empty() {
        return Err(Error::corrupt(24, "the attr section holds no events"));
    }

    let mut features = Features::default();
    let mut features_cut_at = None;
    if data.size != 0 {
        let bitmap: Vec<u64> = (0..4).map(|i| q(72 + 8 * i)).collect();
        let mut table = data.offset.saturating_add(data.size);
        for feature in 0..FEAT_BITS {
            let word = bitmap.get((feature / 64) as usize).copied().unwrap_or(0);
            if word & (1 << (feature % 64)) == 0 {
                continue;
            }
            let Some(sec) = usize::try_from(table).ok().and_then(|t| Section::at(b, t)) else {
                features_cut_at.get_or_insert(table);
                break;
            };
            table = table.saturating_add(16);
            match sec.slice(b, "a feature section") {
                Ok(bytes) => features.add(feature, bytes, sec.offset),
                Err(_) => {
                    features_cut_at.get_or_insert(sec.offset);
                }
            }
        }
    }
    Ok(FileHeader { attrs, data, features, features_cut_at })
}

/// Applies the names of `descs` to `attrs`: matched by first id (as perf does), else by
/// an identical attr, else by position.
pub(crate) fn name_attrs(attrs: &mut [EventAttr], descs: &[Desc]) {
    for (i, d) in descs.iter().enumerate() {
        let by_id = d.ids.first().and_then(|id| attrs.iter().position(|a| a.ids.contains(id)));
        let by_attr = || attrs.iter().position(|a| a.attr == d.attr);
        if let Some(a) = by_id.or_else(by_attr).or(Some(i)).and_then(|j| attrs.get_mut(j)) {
            if !d.name.is_empty() {
                a.name.clone_from(&d.name);
            }
        }
    }
}

/// What pipe mode's header-like records say.
#[derive(Debug, Default)]
pub(crate) struct PipeHeader {
    pub attrs: Vec<EventAttr>,
    pub features: Features,
    /// Names from EVENT_UPDATE records, by event id.
    pub names: Vec<(u64, String)>,
}

impl PipeHeader {
    /// Takes in one record of a pipe-mode stream (`rec` is the whole record).
    pub(crate) fn add(&mut self, kind: u32, rec: &[u8], offset: u64) {
        let body = rec.get(8..).unwrap_or(&[]);
        match kind {
            RECORD_HEADER_ATTR => {
                let size = u32_at(body, 4).map_or(0, |s| s as usize);
                // An attr claims its own size; older writers may leave it 0 (VER0).
                let size = if size == 0 { 64 } else { size }.min(body.len());
                let (attr, ids) = body.split_at(size);
                let attr = Attr::parse(attr);
                self.attrs.push(EventAttr {
                    attr,
                    name: attr.default_name(),
                    ids: words(ids).collect(),
                });
            }
            RECORD_HEADER_FEATURE => {
                if let Some(feature) = u64_at(body, 0).and_then(|f| u32::try_from(f).ok()) {
                    self.features.add(feature, body.get(8..).unwrap_or(&[]), offset);
                }
            }
            RECORD_EVENT_UPDATE if u64_at(body, 0) == Some(EVENT_UPDATE_NAME) => {
                if let Some(id) = u64_at(body, 8) {
                    let name = until_nul(body.get(16..).unwrap_or(&[]));
                    self.names.push((id, String::from_utf8_lossy(name).into_owned()));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hstr(s: &str) -> Vec<u8> {
        let len = (s.len() + 1).div_ceil(64) * 64;
        let mut b = (len as u32).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b.resize(4 + len, 0);
        b
    }

    #[test]
    fn event_desc_cmdline_and_groups() {
        let mut b = 2u32.to_le_bytes().to_vec();
        b.extend(8u32.to_le_bytes()); // attr size 8: type and size only
        for (name, id) in [("task-clock", 10u64), ("page-faults", 11)] {
            b.extend([1u8, 0, 0, 0, 8, 0, 0, 0]);
            b.extend(1u32.to_le_bytes());
            b.extend(hstr(name));
            b.extend(id.to_le_bytes());
        }
        let d = event_desc(&b);
        assert_eq!(d.len(), 2);
        assert_eq!((d[1].name.as_str(), d[1].ids.as_slice()), ("page-faults", &[11][..]));
        // A count far beyond the bytes stops at the bytes.
        b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(event_desc(&b).len(), 2);

        let mut c = 2u32.to_le_bytes().to_vec();
        c.extend(hstr("perf"));
        c.extend(hstr("record"));
        assert_eq!(cmdline(&c), ["perf", "record"]);

        let mut g = 1u32.to_le_bytes().to_vec();
        g.extend(hstr("{anon_group}"));
        g.extend(0u32.to_le_bytes());
        g.extend(2u32.to_le_bytes());
        assert_eq!(group_desc(&g), [GroupDesc { name: None, leader: 0, members: 2 }]);
    }

    #[test]
    fn sections_past_the_end_are_truncation() {
        let b = [0u8; 32];
        assert!(Section { offset: 16, size: 16 }.slice(&b, "x").is_ok());
        assert!(matches!(
            Section { offset: 16, size: 17 }.slice(&b, "x"),
            Err(Error::Truncated { offset: 16, need: 17, end: 32, .. })
        ));
        assert!(matches!(
            Section { offset: u64::MAX, size: 2 }.slice(&b, "x"),
            Err(Error::Corrupt { .. })
        ));
    }
}
