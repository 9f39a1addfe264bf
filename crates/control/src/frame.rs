//! Frames on the wire: a 4-byte big-endian length, then that many bytes. The length is
//! checked against the limit as soon as its 4 bytes are in, so an announced giant is refused
//! before a byte of its body is buffered.

use crate::ControlError;

pub const HEADER_LEN: usize = 4;
/// Largest frame body: Noise's own message limit.
pub const MAX_FRAME: usize = 65_535;
/// Largest handshake frame. Both handshake messages are 48 bytes (ephemeral key + tag).
pub const MAX_HANDSHAKE_FRAME: usize = 128;

/// Prefixes `body` with its length.
pub fn encode(body: &[u8]) -> Result<Vec<u8>, ControlError> {
    if body.len() > MAX_FRAME {
        return Err(ControlError::Oversized {
            len: body.len(),
            max: MAX_FRAME,
        });
    }
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// Where a complete frame sits at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpan {
    /// The body is `buf[HEADER_LEN..end]`.
    pub end: usize,
}

/// Looks for a complete frame at the front of `buf`. `Ok(None)`: more bytes are needed.
/// Fails as soon as the header announces more than `max` bytes.
pub fn split(buf: &[u8], max: usize) -> Result<Option<FrameSpan>, ControlError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(header.try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(ControlError::Oversized { len, max });
    }
    let end = HEADER_LEN + len;
    Ok((buf.len() >= end).then_some(FrameSpan { end }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_only_when_complete() {
        let f = encode(b"hello").unwrap();
        assert_eq!(f.len(), 9);
        for cut in 0..f.len() {
            assert_eq!(split(&f[..cut], 100).unwrap(), None, "cut {cut}");
        }
        assert_eq!(split(&f, 100).unwrap(), Some(FrameSpan { end: 9 }));
        assert_eq!(&f[HEADER_LEN..9], b"hello");
    }

    #[test]
    fn announced_giants_are_refused_from_the_header_alone() {
        let header = 1_000_000u32.to_be_bytes();
        assert!(matches!(
            split(&header, MAX_FRAME),
            Err(ControlError::Oversized { len: 1_000_000, .. })
        ));
        assert!(encode(&vec![0; MAX_FRAME + 1]).is_err());
    }
}
