//! The primitive encodings the records of `__consumer_offsets` are built from, shared by the
//! offset records ([`crate::offsets_log`]), the classic groups' ([`crate::group_metadata`])
//! and the consumer-protocol groups' ([`crate::consumer_group_records`]): big-endian integers,
//! unsigned varints and classic strings. Each module reads its own string and array forms on
//! top of [`Input`], whose errors name what a record lacks.

/// A classic string: its length as an int16, then its bytes.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// What is left of a record's key or value; each read names `what` it reads in its error.
pub(crate) struct Input<'a>(pub(crate) &'a [u8]);

impl<'a> Input<'a> {
    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "{} bytes left where {what} needs {n}",
                self.0.len()
            ));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(crate) fn i16(&mut self, what: &str) -> Result<i16, String> {
        Ok(i16::from_be_bytes(
            self.take(2, what)?.try_into().expect("2 bytes"),
        ))
    }
    pub(crate) fn i32(&mut self, what: &str) -> Result<i32, String> {
        Ok(i32::from_be_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, String> {
        Ok(i64::from_be_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    /// An unsigned varint of at most 5 bytes.
    pub(crate) fn varint(&mut self, what: &str) -> Result<u32, String> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1, what)?[0];
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("{what}: a varint longer than 5 bytes"))
    }
    /// The next `len` bytes, which must be UTF-8.
    pub(crate) fn utf8(&mut self, len: usize, what: &str) -> Result<String, String> {
        let bytes = self.take(len, what)?.to_vec();
        String::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))
    }
    /// How many bytes are left.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A module's reader: its own reads, with [`Input`]'s through `Deref`.
macro_rules! reader_derefs {
    ($reader:ident, $field:tt) => {
        impl<'a> std::ops::Deref for $reader<'a> {
            type Target = crate::record_codec::Input<'a>;
            fn deref(&self) -> &Self::Target {
                &self.$field
            }
        }
        impl std::ops::DerefMut for $reader<'_> {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.$field
            }
        }
    };
}
pub(crate) use reader_derefs;
