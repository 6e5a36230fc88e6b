//! The config-text parser: nom for the tokens, an explicit loop with a depth limit for the
//! nesting, so hostile text can neither overflow the stack nor allocate beyond its own size.

use nom::bytes::complete::{take_till, take_while, take_while1};
use nom::IResult;

use super::{Builder, Str, Tree, Value, MAX_TEXT, SIDE};

/// Deepest section nesting accepted (lvm2 metadata needs 5).
pub const MAX_DEPTH: usize = 32;

/// A syntax error, with the byte offset in the text where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// Something other than what the grammar allows at this point.
    #[error("text offset {offset} (line {line}): {what}")]
    Syntax {
        /// Byte offset in the text.
        offset: usize,
        /// 1-based line number.
        line: usize,
        /// What was expected or found.
        what: String,
    },
}

/// Parses `text` (which ends at its first NUL, as in lvm2) into a tree.
pub fn parse(text: &str) -> Result<Tree<'_>, TextError> {
    // NUL is ASCII, so cutting there keeps the text valid UTF-8.
    let text = memchr::memchr(0, text.as_bytes()).map_or(text, |end| &text[..end]);
    if text.len() > MAX_TEXT {
        return Err(TextError::Syntax {
            offset: 0,
            line: 1,
            what: "text longer than 2 GiB".into(),
        });
    }
    // About one node per 20 bytes of lvm2 metadata.
    let mut p = Parser {
        text,
        pos: 0,
        out: Builder::over(text, text.len() / 20),
    };
    p.nodes()?;
    Ok(p.out.finish())
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    out: Builder<'a>,
}

/// Characters that end an identifier or a bare word.
fn ends_word(c: char) -> bool {
    c.is_ascii_whitespace() || matches!(c, '#' | '=' | '{' | '}')
}

/// Byte classes of the lexer, one table lookup per byte.
const WS: u8 = 1;
/// Ends an identifier or a bare word: white space, `#`, `=`, `{`, `}` (and NUL, which never
/// reaches the lexer).
const WORD_END: u8 = 2;
/// Also ends a bare word in value position: `[`, `]`, `,`.
const ARRAY_PUNCT: u8 = 4;
/// Continues a number: digits and `.`.
const NUM: u8 = 8;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let ws = b" \t\n\r\x0b\x0c";
    let mut i = 0;
    while i < ws.len() {
        t[ws[i] as usize] = WS | WORD_END;
        i += 1;
    }
    t[b'#' as usize] = WORD_END;
    t[b'=' as usize] = WORD_END;
    t[b'{' as usize] = WORD_END;
    t[b'}' as usize] = WORD_END;
    t[0] = WORD_END;
    t[b'[' as usize] = ARRAY_PUNCT;
    t[b']' as usize] = ARRAY_PUNCT;
    t[b',' as usize] = ARRAY_PUNCT;
    t[b'.' as usize] = NUM;
    let mut d = b'0';
    while d <= b'9' {
        t[d as usize] = NUM;
        d += 1;
    }
    t
};

fn class(b: u8) -> u8 {
    CLASS[b as usize]
}

fn word(i: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while1(|c: u8| class(c) & WORD_END == 0)(i)
}

/// A bare word in value position also ends at array punctuation.
fn bare_word(i: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while1(|c: u8| class(c) & (WORD_END | ARRAY_PUNCT) == 0)(i)
}

fn digits(i: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while(|c: u8| class(c) & NUM != 0)(i)
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.text.as_bytes()[self.pos..]
    }

    /// Skips white space and `#` comments (to the end of their line).
    fn skip_ws(&mut self) {
        let b = self.text.as_bytes();
        let mut i = self.pos;
        loop {
            while b.get(i).is_some_and(|&c| class(c) & WS != 0) {
                i += 1;
            }
            if b.get(i) != Some(&b'#') {
                break;
            }
            let r: IResult<&[u8], &[u8]> = take_till(|c| c == b'\n')(&b[i..]);
            i = r.map_or(b.len(), |(r, _)| b.len() - r.len());
        }
        self.pos = i;
    }

    /// Moves to `rest` and returns the text between the old position and it. Every token
    /// ends at an ASCII byte, so the cut is on a character boundary.
    fn take_until(&mut self, rest: &'a [u8]) -> Str {
        let start = self.pos;
        self.pos = self.text.len() - rest.len();
        Builder::src_str(start, self.pos - start)
    }

    fn err<T>(&self, what: impl Into<String>) -> Result<T, TextError> {
        let line = self.text[..self.pos]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1;
        Err(TextError::Syntax {
            offset: self.pos,
            line,
            what: what.into(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.rest().first().map(|&b| b as char)
    }

    /// Nodes until the end of the text, sections included (kept iterative: the nesting lives
    /// in the builder, not on the stack).
    fn nodes(&mut self) -> Result<(), TextError> {
        let mut names: Vec<Str> = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None if names.is_empty() => return Ok(()),
                None => return self.err("unexpected end of text: missing '}'"),
                Some('}') if !names.is_empty() => {
                    self.pos += 1;
                    let name = names.pop().unwrap_or_default();
                    self.out.close(name);
                }
                Some(_) => {
                    let key = self.key()?;
                    self.skip_ws();
                    match self.peek() {
                        Some('=') => {
                            self.pos += 1;
                            let v = self.value(true)?;
                            self.out.value(key, v);
                        }
                        Some('{') => {
                            if names.len() >= MAX_DEPTH {
                                return self
                                    .err(format!("sections nested deeper than {MAX_DEPTH}"));
                            }
                            self.pos += 1;
                            self.out.open();
                            names.push(key);
                        }
                        _ => {
                            let key = self.out.tree.str(key).to_owned();
                            return self.err(format!("expected '=' or '{{' after {key:?}"));
                        }
                    }
                }
            }
        }
    }

    fn key(&mut self) -> Result<Str, TextError> {
        match self.peek() {
            Some('"') => self.dquoted(),
            Some('\'') => self.squoted(),
            _ => match word(self.rest()) {
                Ok((r, _)) => Ok(self.take_until(r)),
                Err(_) => self.err("expected a key"),
            },
        }
    }

    fn value(&mut self, array_allowed: bool) -> Result<Value, TextError> {
        self.skip_ws();
        match self.peek() {
            Some('[') if array_allowed => {
                self.pos += 1;
                let start = self.out.begin_array();
                let mut any = false;
                loop {
                    self.skip_ws();
                    match self.peek() {
                        Some(']') => {
                            self.pos += 1;
                            return Ok(self.out.end_array(start));
                        }
                        Some(',') if any => self.pos += 1,
                        None => return self.err("unexpected end of text: missing ']'"),
                        _ => {
                            let v = self.value(false)?;
                            self.out.item(v);
                            any = true;
                        }
                    }
                }
            }
            Some('"') => Ok(Value::Str(self.dquoted()?)),
            Some('\'') => Ok(Value::Str(self.squoted()?)),
            Some(c) if c.is_ascii_digit() || matches!(c, '+' | '-' | '.') => self.number(),
            Some(c) if !ends_word(c) && !matches!(c, '[' | ']' | ',') => {
                match bare_word(self.rest()) {
                    Ok((r, _)) => Ok(Value::Bare(self.take_until(r))),
                    Err(_) => self.err("expected a value"),
                }
            }
            Some(c) => self.err(format!("unexpected {c:?} where a value belongs")),
            None => self.err("unexpected end of text: missing value"),
        }
    }

    fn number(&mut self) -> Result<Value, TextError> {
        let rest = self.rest();
        // Fast path, one pass: plain decimal without a leading zero (every number lvm2
        // writes), up to 18 digits, ending where a number ends.
        if rest
            .first()
            .is_some_and(|&b| b.is_ascii_digit() && b != b'0')
        {
            let mut v = 0i64;
            let mut n = 0;
            while let Some(&d) = rest.get(n).filter(|d| d.is_ascii_digit()) {
                if n == 18 {
                    break;
                }
                v = v * 10 + i64::from(d - b'0');
                n += 1;
            }
            if rest.get(n).is_none_or(|&b| class(b) & NUM == 0) {
                self.pos += n;
                return Ok(Value::Int(v));
            }
        }
        let sign = usize::from(matches!(rest.first(), Some(b'+' | b'-')));
        let (r, body) = match digits(&rest[sign..]) {
            Ok(x) => x,
            Err(_) => return self.err("expected a number"),
        };
        let dots = body.iter().filter(|&&b| b == b'.').count();
        let start = self.pos;
        let s = self.take_until(r);
        let tok = &self.text[start..self.pos];
        if dots > 0 {
            if dots > 1 {
                self.pos = start;
                return self.err(format!("malformed number {tok:?}"));
            }
            return Ok(Value::Float(s));
        }
        match strtoll(tok) {
            Some(v) => Ok(Value::Int(v)),
            None => {
                self.pos = start;
                self.err(format!("integer {tok:?} is out of range"))
            }
        }
    }

    fn dquoted(&mut self) -> Result<Str, TextError> {
        let body_start = self.pos + 1;
        let bytes = self.text.as_bytes();
        let mut i = body_start;
        let mut escaped = false;
        // Most strings are short and plain: look at their first bytes one by one.
        let head = &bytes[i.min(bytes.len())..bytes.len().min(i + 16)];
        if let Some(off) = head.iter().position(|&b| b == b'"' || b == b'\\') {
            if bytes[i + off] == b'"' {
                self.pos = i + off + 1;
                return Ok(Builder::src_str(body_start, off));
            }
        }
        // Jump from one quote or backslash to the next (SIMD through memchr).
        while let Some(off) = memchr::memchr2(b'"', b'\\', &bytes[i.min(bytes.len())..]) {
            i += off;
            if bytes[i] == b'\\' {
                escaped = true;
                i += 2;
                continue;
            }
            self.pos = i + 1;
            return Ok(if escaped {
                self.unescaped(body_start, i)
            } else {
                Builder::src_str(body_start, i - body_start)
            });
        }
        self.err("unterminated string")
    }

    fn squoted(&mut self) -> Result<Str, TextError> {
        let start = self.pos + 1;
        match memchr::memchr(b'\'', &self.text.as_bytes()[start..]) {
            Some(end) => {
                self.pos = start + end + 1;
                Ok(Builder::src_str(start, end))
            }
            None => self.err("unterminated string"),
        }
    }
}

impl Parser<'_> {
    /// The text between `start` and `end` unescaped into the side buffer. The unescaped
    /// string is never longer than the text, so the side buffer stays within MAX_TEXT.
    fn unescaped(&mut self, start: usize, end: usize) -> Str {
        let side = &mut self.out.tree.side;
        let at = side.len();
        unescape_into(side, &self.text[start..end]);
        Str {
            start: at as u32,
            len: (side.len() - at) as u32 | SIDE,
        }
    }
}

/// libdm's unescaping: `\"` and `\\` lose their backslash; other sequences stay as written.
fn unescape_into(out: &mut String, raw: &str) {
    out.reserve(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('"' | '\\')) => out.push(n),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
}

/// C's `strtoll(tok, NULL, 0)` for the tokens the lexer produces (sign, digits), except that
/// overflow is an error instead of saturating.
fn strtoll(tok: &str) -> Option<i64> {
    // Fast path: plain decimal without a leading zero, as lvm2 writes every number.
    let b = tok.as_bytes();
    if !b.is_empty() && b.len() <= 18 && b[0] != b'0' && b.iter().all(u8::is_ascii_digit) {
        return Some(b.iter().fold(0i64, |v, d| v * 10 + i64::from(d - b'0')));
    }
    let (neg, digits) = match tok.as_bytes().first() {
        Some(b'-') => (true, &tok[1..]),
        Some(b'+') => (false, &tok[1..]),
        _ => (false, tok),
    };
    let (radix, digits) = if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    // strtoll stops at the first digit that is not valid in the radix.
    let valid = digits
        .bytes()
        .take_while(|b| (*b as char).is_digit(radix))
        .count();
    let mut v: i128 = 0;
    for b in digits[..valid].bytes() {
        v = v * i128::from(radix) + i128::from(b - b'0');
        if v > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Body;

    /// The value of the first node, rendered back to text.
    fn first(t: &str) -> String {
        let tree = parse(t).expect("parses");
        match &tree.top()[0].body {
            Body::Value(v) => {
                let mut e = crate::text::Emitter::new(crate::text::Style::Raw);
                e.value(&tree, "a", v);
                e.finish().trim_end().trim_start_matches("a = ").to_owned()
            }
            Body::Section(_) => panic!("not a value"),
        }
    }

    #[test]
    fn values() {
        assert_eq!(first("a = 12"), "12");
        assert_eq!(first("a = -1"), "-1");
        assert_eq!(first("a = 0100"), "64");
        assert_eq!(first("a = 09"), "0");
        let t = parse("a = \"x\\\"y\\\\z\\n\"").expect("parses");
        assert!(
            matches!(&t.top()[0].body, Body::Value(Value::Str(s)) if t.str(*s) == "x\"y\\z\\n")
        );
        let t = parse("a = 'it\\'").expect("parses");
        assert!(matches!(&t.top()[0].body, Body::Value(Value::Str(s)) if t.str(*s) == "it\\"));
        let t = parse("a = auto").expect("parses");
        assert!(matches!(&t.top()[0].body, Body::Value(Value::Bare(s)) if t.str(*s) == "auto"));
        let t = parse("a = 1.5").expect("parses");
        assert!(matches!(&t.top()[0].body, Body::Value(Value::Float(s)) if t.str(*s) == "1.5"));
        assert_eq!(
            first("a = [\"pv0\", 0 \"pv1\" 4]"),
            "[\"pv0\", 0, \"pv1\", 4]"
        );
        assert_eq!(first("a = []"), "[]");
        // Around the one-pass path for plain decimals (at most 18 digits).
        assert_eq!(first("a = 123456789012345678"), "123456789012345678");
        assert_eq!(first("a = 1234567890123456789"), "1234567890123456789");
        assert_eq!(first("a = 9223372036854775807"), "9223372036854775807");
        assert_eq!(first("a = 7\nb = 1"), "7");
        assert_eq!(first("a = [7,8]"), "[7, 8]");
        let t = parse("a = 12.25").expect("parses");
        assert!(matches!(&t.top()[0].body, Body::Value(Value::Float(s)) if t.str(*s) == "12.25"));
        assert!(parse("a = 1.2.3").is_err());
        // Short strings, strings longer than the first look, and escapes after it.
        assert_eq!(first("a = \"\""), "\"\"");
        let long = "x".repeat(40);
        assert_eq!(first(&format!("a = \"{long}\"")), format!("\"{long}\""));
        let t = parse("a = \"0123456789abcdefgh\\\"i\"").expect("parses");
        assert!(
            matches!(&t.top()[0].body, Body::Value(Value::Str(s)) if t.str(*s) == "0123456789abcdefgh\"i")
        );
    }

    #[test]
    fn sections_comments_and_nul() {
        let t =
            parse("vg {\n# c\n id = \"x\" # tail\n sub { k = 1 }\n}\ncontents = \"y\"\0garbage {")
                .expect("parses");
        assert_eq!(t.top().len(), 2);
        assert_eq!(t.key(&t.top()[0]), "vg");
        let Body::Section(s) = t.top()[0].body else {
            panic!("not a section")
        };
        assert_eq!(t.children(s).len(), 2);
        // Keys may start with digits or dashes.
        assert!(parse("1lv { -x = 1 }").is_ok());
    }

    #[test]
    fn hostile() {
        assert!(parse("a = 0x40").is_err());
        assert!(parse("a = \"never closed").is_err());
        assert!(parse("a { b = 1").is_err());
        assert!(parse("a = 99999999999999999999").is_err());
        assert!(parse("a = [1, [2]]").is_err());
        assert!(parse("a = [1, 2").is_err());
        assert!(parse("a").is_err());
        assert!(parse("= 1").is_err());
        assert!(parse("}").is_err());
        let deep = "a {".repeat(MAX_DEPTH + 2) + &"}".repeat(MAX_DEPTH + 2);
        assert!(parse(&deep).is_err());
        let ok = "a {".repeat(MAX_DEPTH) + &"}".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
        assert_eq!(first("a = -9223372036854775808"), "-9223372036854775808");
        assert!(parse("a = 9223372036854775808").is_err());
    }
}
