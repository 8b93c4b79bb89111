//! A small, strict bencode decoder for checking tracker answers (the load generator
//! and the tests use it). It is written independently of the writer in
//! [`crate::response`], so a round trip through both checks one against the other.
//!
//! Strict means canonical: integers and lengths without leading zeros, no `-0`,
//! dictionary keys in strictly ascending byte order, nothing after the value.

use std::fmt;

/// Nesting deeper than this is refused, so hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

/// A decoded value, borrowing its byte strings from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Int(i64),
    Bytes(&'a [u8]),
    List(Vec<Value<'a>>),
    /// Entries in the input's (ascending) key order.
    Dict(Vec<(&'a [u8], Value<'a>)>),
}

impl<'a> Value<'a> {
    /// The entry `key` of a dictionary; `None` for a missing key or a non-dictionary.
    pub fn get(&self, key: &[u8]) -> Option<&Value<'a>> {
        match self {
            Value::Dict(entries) => entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[Value<'a>]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }
}

/// The input is not one canonical bencoded value; `offset` is where that showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid bencode at byte {}", self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// Decodes `input`, which must hold exactly one value.
pub fn decode(input: &[u8]) -> Result<Value<'_>, DecodeError> {
    let mut decoder = Decoder { input, pos: 0 };
    let value = decoder.value(0)?;
    if decoder.pos == input.len() {
        Ok(value)
    } else {
        Err(decoder.error())
    }
}

struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn error(&self) -> DecodeError {
        DecodeError { offset: self.pos }
    }

    fn peek(&self) -> Result<u8, DecodeError> {
        self.input.get(self.pos).copied().ok_or(self.error())
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(self.error());
        }
        match self.peek()? {
            b'i' => {
                self.pos += 1;
                let digits = self.until(b'e')?;
                canonical_int(digits).map(Value::Int).ok_or(self.error())
            }
            b'l' => {
                self.pos += 1;
                let mut items = Vec::new();
                while self.peek()? != b'e' {
                    items.push(self.value(depth + 1)?);
                }
                self.pos += 1;
                Ok(Value::List(items))
            }
            b'd' => {
                self.pos += 1;
                let mut entries: Vec<(&[u8], Value)> = Vec::new();
                while self.peek()? != b'e' {
                    let key = self.bytes()?;
                    if entries.last().is_some_and(|(last, _)| *last >= key) {
                        return Err(self.error());
                    }
                    entries.push((key, self.value(depth + 1)?));
                }
                self.pos += 1;
                Ok(Value::Dict(entries))
            }
            _ => self.bytes().map(Value::Bytes),
        }
    }

    /// A `<length>:<bytes>` string.
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let digits = self.until(b':')?;
        let len = canonical_int(digits)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(self.error())?;
        let end = self.pos.checked_add(len).ok_or(self.error())?;
        let bytes = self.input.get(self.pos..end).ok_or(self.error())?;
        self.pos = end;
        Ok(bytes)
    }

    /// The bytes up to `end`, stepping past `end`.
    fn until(&mut self, end: u8) -> Result<&'a [u8], DecodeError> {
        let rest = self.input.get(self.pos..).unwrap_or_default();
        let len = rest.iter().position(|&b| b == end).ok_or(self.error())?;
        self.pos += len + 1;
        rest.get(..len).ok_or(self.error())
    }
}

/// A decimal integer without a sign `+`, leading zeros or `-0`.
fn canonical_int(digits: &[u8]) -> Option<i64> {
    let magnitude = digits.strip_prefix(b"-").unwrap_or(digits);
    let canonical = match magnitude {
        [b'0'] => magnitude.len() == digits.len(),
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_nested_values() {
        let v = decode(b"d3:bari-7e3:fool4:spami0eee").unwrap();
        assert_eq!(v.get(b"bar").and_then(Value::as_int), Some(-7));
        let list = v.get(b"foo").and_then(Value::as_list).unwrap();
        assert_eq!(list, [Value::Bytes(b"spam"), Value::Int(0)]);
        assert_eq!(decode(b"0:").unwrap(), Value::Bytes(b""));
    }

    #[test]
    fn rejects_non_canonical_or_broken_input() {
        for bad in [
            &b""[..],
            b"i-0e",
            b"i01e",
            b"i+1e",
            b"ie",
            b"i1",
            b"i9223372036854775808e",
            b"01:a",
            b"-1:a",
            b"5:abc",
            b"d1:bi1e1:ai2ee",
            b"d1:ai1e1:ai2ee",
            b"di1ei2ee",
            b"l",
            b"i1ei2e",
            b"x",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn refuses_deep_nesting() {
        let deep: Vec<u8> = [vec![b'l'; 1000], vec![b'e'; 1000]].concat();
        assert!(decode(&deep).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = decode(&input);
        }
    }
}
