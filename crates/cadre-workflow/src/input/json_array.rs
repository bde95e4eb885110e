//! One JSON array read an element at a time: a small scanner finds where each element
//! ends (a comma or the closing bracket outside strings and nesting), and only that
//! element is parsed, so a million-element array is never held whole.

use super::item::{BadItem, Raw};
use std::io::{BufReader, Bytes, Read};
use std::iter::Peekable;

/// Where the scanner is in the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening bracket.
    Start,
    /// Between elements.
    Inside,
    /// After the closing bracket, or after a fault that ends the input.
    Done,
}

/// The elements of a JSON array, one [`Raw`] each.
pub(crate) struct JsonArray<R: Read> {
    bytes: Peekable<Bytes<BufReader<R>>>,
    line: u64,
    state: State,
}

impl<R: Read> JsonArray<R> {
    /// Reads the array in `reader`.
    pub(crate) fn new(reader: R) -> Self {
        Self {
            bytes: BufReader::new(reader).bytes().peekable(),
            line: 1,
            state: State::Start,
        }
    }

    /// Skips blanks, counting lines; `Err` on a read error.
    fn skip_blanks(&mut self) -> Result<(), std::io::Error> {
        while let Some(Ok(b)) = self.bytes.peek() {
            if !b.is_ascii_whitespace() {
                break;
            }
            if *b == b'\n' {
                self.line += 1;
            }
            self.bytes.next();
        }
        match self.bytes.peek() {
            Some(Err(_)) => match self.bytes.next() {
                Some(Err(e)) => Err(e),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Ends the input with `why`, at the current line.
    fn fail(&mut self, why: BadItem) -> Option<Raw> {
        self.state = State::Done;
        Some(Err((Some(self.line), why)))
    }

    /// The bytes of the next element, up to the comma or bracket that ends it (consumed);
    /// `Err` when the input ends or breaks first.
    fn element(&mut self) -> Result<Vec<u8>, std::io::Error> {
        let mut buf = Vec::new();
        let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
        loop {
            let b = match self.bytes.next() {
                Some(b) => b?,
                None => return Err(unterminated()),
            };
            if b == b'\n' {
                self.line += 1;
            }
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b']' if depth <= 0 => {
                        self.state = State::Done;
                        return Ok(buf);
                    }
                    b'}' | b']' => depth -= 1,
                    b',' if depth <= 0 => return Ok(buf),
                    _ => {}
                }
            }
            buf.push(b);
        }
    }
}

/// The fault of an array that ends before its closing bracket.
fn unterminated() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the JSON array ends before its closing `]`",
    )
}

impl<R: Read> Iterator for JsonArray<R> {
    type Item = Raw;

    fn next(&mut self) -> Option<Raw> {
        if self.state == State::Done {
            return None;
        }
        if let Err(e) = self.skip_blanks() {
            return self.fail(BadItem::Broken(e));
        }
        if self.state == State::Start {
            match self.bytes.next() {
                Some(Ok(b'[')) => self.state = State::Inside,
                None => return None,
                _ => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the input is not a JSON array (it does not start with `[`)",
                    );
                    return self.fail(BadItem::Broken(e));
                }
            }
            if let Err(e) = self.skip_blanks() {
                return self.fail(BadItem::Broken(e));
            }
        }
        // `[]`, or a trailing comma before the closing bracket.
        if let Some(Ok(b']')) = self.bytes.peek() {
            self.state = State::Done;
            return None;
        }
        let line = self.line;
        match self.element() {
            Ok(bytes) => Some(
                serde_json::from_slice(&bytes)
                    .map(|v| (Some(line), v))
                    .map_err(|e| (Some(line), BadItem::NotJson(e))),
            ),
            Err(e) => self.fail(BadItem::Broken(e)),
        }
    }
}
