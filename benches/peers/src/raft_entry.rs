//! A minimal protobuf-2 log entry for raft-engine (`index`: field 1, uint64; `data`: field 2,
//! bytes), written by hand so the benchmark does not pull in `raft-proto` and its code
//! generator. The wire format is the same as raft's `eraftpb::Entry` restricted to those two
//! fields.

use protobuf::rt;
use protobuf::wire_format::WireType;
use protobuf::{CodedInputStream, CodedOutputStream, Message, ProtobufResult, UnknownFields};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    pub index: u64,
    pub data: Vec<u8>,
    unknown: UnknownFields,
}

impl Entry {
    pub fn new(index: u64, data: Vec<u8>) -> Entry {
        Entry {
            index,
            data,
            unknown: UnknownFields::new(),
        }
    }
}

impl protobuf::Clear for Entry {
    fn clear(&mut self) {
        self.index = 0;
        self.data.clear();
        self.unknown.clear();
    }
}

impl Message for Entry {
    fn descriptor(&self) -> &'static protobuf::reflect::MessageDescriptor {
        unimplemented!("no reflection for the benchmark entry")
    }

    fn is_initialized(&self) -> bool {
        true
    }

    fn merge_from(&mut self, is: &mut CodedInputStream) -> ProtobufResult<()> {
        while !is.eof()? {
            let (field, wire_type) = is.read_tag_unpack()?;
            match field {
                1 => {
                    if wire_type != WireType::WireTypeVarint {
                        return Err(rt::unexpected_wire_type(wire_type));
                    }
                    self.index = is.read_uint64()?;
                }
                2 => {
                    if wire_type != WireType::WireTypeLengthDelimited {
                        return Err(rt::unexpected_wire_type(wire_type));
                    }
                    is.read_bytes_into(&mut self.data)?;
                }
                _ => rt::read_unknown_or_skip_group(field, wire_type, is, &mut self.unknown)?,
            }
        }
        Ok(())
    }

    fn write_to_with_cached_sizes(&self, os: &mut CodedOutputStream) -> ProtobufResult<()> {
        os.write_uint64(1, self.index)?;
        os.write_bytes(2, &self.data)?;
        Ok(())
    }

    fn compute_size(&self) -> u32 {
        rt::value_size(1, self.index, WireType::WireTypeVarint) + rt::bytes_size(2, &self.data)
    }

    fn get_cached_size(&self) -> u32 {
        self.compute_size()
    }

    fn get_unknown_fields(&self) -> &UnknownFields {
        &self.unknown
    }

    fn mut_unknown_fields(&mut self) -> &mut UnknownFields {
        &mut self.unknown
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }

    fn new() -> Self {
        Entry::default()
    }

    fn default_instance() -> &'static Self {
        static DEFAULT: std::sync::OnceLock<Entry> = std::sync::OnceLock::new();
        DEFAULT.get_or_init(Entry::default)
    }
}

/// raft-engine's hook from an entry type to its index.
pub struct EntryExt;

impl raft_engine::MessageExt for EntryExt {
    type Entry = Entry;

    fn index(e: &Entry) -> u64 {
        e.index
    }
}
