//! W3C Trace Context as a tool call carries it: `traceparent` and `tracestate`, read once at the
//! edge and checked against the W3C grammar (Trace Context, level 1). A value that does not
//! parse is ignored, never refused: a call with a broken header runs as a call without one.

/// Length of a version-00 `traceparent`: `vv-<32 hex trace id>-<16 hex parent id>-ff`.
const TRACEPARENT_LEN: usize = 55;
/// The longest `tracestate` kept (the size every participant must propagate); a longer one is
/// dropped whole rather than cut.
pub const TRACESTATE_MAX_LEN: usize = 512;
/// Most members a `tracestate` may list.
const TRACESTATE_MAX_MEMBERS: usize = 32;

/// A `traceparent` that matches the W3C grammar: a version other than `ff`, a trace id and a
/// parent id of lowercase hex that are not all zeros, two hex digits of flags. A later version
/// is read by its first 55 characters (followed by the end or `-`, as the specification asks)
/// and kept as version `00`, the one this implementation speaks.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent([u8; TRACEPARENT_LEN]);

fn lower_hex(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

fn all_zeros(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| *b == b'0')
}

impl TraceParent {
    /// `None` unless `value` is a valid `traceparent` (surrounding blanks allowed).
    pub fn parse(value: &str) -> Option<Self> {
        let v = value.trim_matches([' ', '\t']).as_bytes();
        if v.len() < TRACEPARENT_LEN {
            return None;
        }
        let (version, rest) = v.split_at(2);
        if !lower_hex(version) || version == b"ff" {
            return None;
        }
        // Version 00 is exactly 55 characters; a later one may go on after a dash.
        if version == b"00" && v.len() != TRACEPARENT_LEN {
            return None;
        }
        if v.len() > TRACEPARENT_LEN && v[TRACEPARENT_LEN] != b'-' {
            return None;
        }
        let fields = &rest[..TRACEPARENT_LEN - 2];
        if fields[0] != b'-' || fields[33] != b'-' || fields[50] != b'-' {
            return None;
        }
        let (trace_id, parent_id, flags) = (&fields[1..33], &fields[34..50], &fields[51..53]);
        if !lower_hex(trace_id) || !lower_hex(parent_id) || !lower_hex(flags) {
            return None;
        }
        if all_zeros(trace_id) || all_zeros(parent_id) {
            return None;
        }
        let mut out = [0u8; TRACEPARENT_LEN];
        out.copy_from_slice(&v[..TRACEPARENT_LEN]);
        out[..2].copy_from_slice(b"00");
        Some(TraceParent(out))
    }

    /// A version-00 `traceparent` for these ids; `None` when one is not lowercase hex of the
    /// right length or is all zeros.
    pub fn new(trace_id: &str, parent_id: &str, sampled: bool) -> Option<Self> {
        let flags = if sampled { "01" } else { "00" };
        TraceParent::parse(&format!("00-{trace_id}-{parent_id}-{flags}"))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and dashes are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The trace id: 32 lowercase hex characters.
    pub fn trace_id(&self) -> &str {
        &self.as_str()[3..35]
    }

    /// The id of the caller's span: 16 lowercase hex characters.
    pub fn parent_id(&self) -> &str {
        &self.as_str()[36..52]
    }

    /// Whether the caller sampled (records) the trace.
    pub fn sampled(&self) -> bool {
        let flags = &self.0[53..55];
        let low = match flags[1] {
            b @ b'0'..=b'9' => b - b'0',
            b => b - b'a' + 10,
        };
        low & 1 == 1
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TraceParent({})", self.as_str())
    }
}

/// A `tracestate` that matches the W3C list grammar: at most 32 members `key=value`, keys
/// unique, at most [`TRACESTATE_MAX_LEN`] characters in all. Kept as it came, blanks between
/// members trimmed.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TraceState(Box<str>);

fn key_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'*' | b'/')
}

/// `simple-key` (`lcalpha 0*255(key char)`) or `tenant-id@system-id`
/// (`(lcalpha / DIGIT) 0*240(key char) "@" lcalpha 0*13(key char)`).
fn valid_key(key: &[u8]) -> bool {
    match key.iter().position(|b| *b == b'@') {
        None => {
            !key.is_empty()
                && key.len() <= 256
                && key[0].is_ascii_lowercase()
                && key.iter().all(|b| key_char(*b))
        }
        Some(at) => {
            let (tenant, system) = (&key[..at], &key[at + 1..]);
            !tenant.is_empty()
                && tenant.len() <= 241
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && tenant.iter().all(|b| key_char(*b))
                && !system.is_empty()
                && system.len() <= 14
                && system[0].is_ascii_lowercase()
                && system.iter().all(|b| key_char(*b))
        }
    }
}

/// `0*255(chr) nblk-chr`: printable ASCII without `,` and `=`, not ending with a space.
fn valid_value(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && value.last() != Some(&b' ')
        && value
            .iter()
            .all(|b| (0x20..=0x7e).contains(b) && *b != b',' && *b != b'=')
}

impl TraceState {
    /// `None` unless `value` is a valid, non-empty `tracestate` of at most
    /// [`TRACESTATE_MAX_LEN`] characters.
    pub fn parse(value: &str) -> Option<Self> {
        if value.len() > TRACESTATE_MAX_LEN {
            return None;
        }
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut members: Vec<&str> = Vec::new();
        for member in value.split(',') {
            let member = member.trim_matches([' ', '\t']);
            if member.is_empty() {
                continue;
            }
            let (key, val) = member.split_once('=')?;
            if !valid_key(key.as_bytes()) || !valid_value(val.as_bytes()) {
                return None;
            }
            if keys.contains(&key.as_bytes()) {
                return None;
            }
            keys.push(key.as_bytes());
            members.push(member);
        }
        if members.is_empty() || members.len() > TRACESTATE_MAX_MEMBERS {
            return None;
        }
        Some(TraceState(members.join(",").into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TraceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a call carries of its caller's trace: a valid `traceparent`, and its `tracestate` when
/// that is valid too (a `tracestate` without a valid `traceparent` means nothing).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TraceContext {
    pub parent: TraceParent,
    pub state: Option<TraceState>,
}

impl TraceContext {
    /// The context of a request's `traceparent` and `tracestate` values; `None` when the
    /// `traceparent` is missing or invalid. Allocates only for a valid `tracestate`.
    pub fn from_values(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = TraceParent::parse(traceparent?)?;
        Some(TraceContext {
            parent,
            state: tracestate.and_then(TraceState::parse),
        })
    }

    pub fn trace_id(&self) -> &str {
        self.parent.trace_id()
    }
}
