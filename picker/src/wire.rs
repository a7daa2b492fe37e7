//! Reading the little-endian records the workers, the pool service and peer replicas write:
//! every read is checked, a record cut short reads as `None`, never a panic.

/// Reads a record front to back.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// The next `len` bytes.
    pub(crate) fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.bytes.split_at_checked(len)?;
        self.bytes = rest;
        Some(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[byte]| byte)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    pub(crate) fn f64(&mut self) -> Option<f64> {
        self.array().map(f64::from_le_bytes)
    }

    /// What is left unread.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_and_a_short_record_reads_as_none() {
        let mut bytes = vec![7u8];
        bytes.extend_from_slice(&513u16.to_le_bytes());
        bytes.extend_from_slice(&1.5f64.to_le_bytes());
        bytes.extend_from_slice(&[1, 2]);
        let mut reader = Reader::new(&bytes);
        assert_eq!((reader.u8(), reader.u16(), reader.f64()), (Some(7), Some(513), Some(1.5)));
        assert_eq!(reader.u32(), None, "two bytes left");
        assert_eq!(reader.rest(), &[1, 2], "a failed read takes nothing");
        assert_eq!(reader.take(2), Some(&[1u8, 2][..]));
        assert_eq!((reader.u8(), reader.rest().len()), (None, 0));
    }
}
