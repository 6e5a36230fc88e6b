//! The config-text parser: nom for the tokens, an explicit loop with a depth limit for the
//! nesting, so hostile text can neither overflow the stack nor allocate beyond its own size.

use std::borrow::Cow;

use nom::bytes::complete::{take_till, take_while, take_while1};
use nom::IResult;

use super::{Body, Node, Tree, Value};

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
    let mut p = Parser { text, pos: 0 };
    let nodes = p.nodes(0)?;
    Ok(Tree { nodes })
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

/// Characters that end an identifier or a bare word.
fn ends_word(c: char) -> bool {
    c.is_ascii_whitespace() || matches!(c, '#' | '=' | '{' | '}')
}

/// Bytes that end an identifier or a bare word (all ASCII, so byte scanning is exact).
fn ends_word_byte(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b'#' | b'=' | b'{' | b'}')
}

fn ws_and_comments(mut i: &[u8]) -> &[u8] {
    loop {
        let skip = i
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(i.len());
        i = &i[skip..];
        if i.first() == Some(&b'#') {
            let r: IResult<&[u8], &[u8]> = take_till(|c| c == b'\n')(i);
            i = r.map(|(r, _)| r).unwrap_or(&[]);
        } else {
            return i;
        }
    }
}

fn word(i: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while1(|c: u8| !ends_word_byte(c))(i)
}

/// A bare word in value position also ends at array punctuation.
fn bare_word(i: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while1(|c: u8| !ends_word_byte(c) && !matches!(c, b'[' | b']' | b','))(i)
}

fn digits(i: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while(|c: u8| c.is_ascii_digit() || c == b'.')(i)
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.text.as_bytes()[self.pos..]
    }

    fn skip_ws(&mut self) {
        let r = ws_and_comments(self.rest());
        self.pos = self.text.len() - r.len();
    }

    /// Moves to `rest` and returns the text between the old position and it. Every token
    /// ends at an ASCII byte, so the cut is on a character boundary.
    fn take_until(&mut self, rest: &'a [u8]) -> &'a str {
        let start = self.pos;
        self.pos = self.text.len() - rest.len();
        &self.text[start..self.pos]
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

    /// Nodes until the end of the text (depth 0) or a closing `}`.
    fn nodes(&mut self, depth: usize) -> Result<Vec<Node<'a>>, TextError> {
        if depth > MAX_DEPTH {
            return self.err(format!("sections nested deeper than {MAX_DEPTH}"));
        }
        // lvm2's sections hold up to a dozen nodes; start there to avoid regrowing.
        let mut out = Vec::with_capacity(if depth == 0 { 8 } else { 12 });
        loop {
            self.skip_ws();
            match self.peek() {
                None if depth == 0 => return Ok(out),
                None => return self.err("unexpected end of text: missing '}'"),
                Some('}') if depth > 0 => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(_) => {
                    let key = self.key()?;
                    self.skip_ws();
                    match self.peek() {
                        Some('=') => {
                            self.pos += 1;
                            let v = self.value(true)?;
                            out.push(Node {
                                key,
                                body: Body::Value(v),
                            });
                        }
                        Some('{') => {
                            self.pos += 1;
                            let inner = self.nodes(depth + 1)?;
                            out.push(Node {
                                key,
                                body: Body::Section(inner),
                            });
                        }
                        _ => return self.err(format!("expected '=' or '{{' after {key:?}")),
                    }
                }
            }
        }
    }

    fn key(&mut self) -> Result<Cow<'a, str>, TextError> {
        match self.peek() {
            Some('"') => self.dquoted(),
            Some('\'') => self.squoted(),
            _ => match word(self.rest()) {
                Ok((r, _)) => Ok(Cow::Borrowed(self.take_until(r))),
                Err(_) => self.err("expected a key"),
            },
        }
    }

    fn value(&mut self, array_allowed: bool) -> Result<Value<'a>, TextError> {
        self.skip_ws();
        match self.peek() {
            Some('[') if array_allowed => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_ws();
                    match self.peek() {
                        Some(']') => {
                            self.pos += 1;
                            return Ok(Value::Array(items));
                        }
                        Some(',') if !items.is_empty() => self.pos += 1,
                        None => return self.err("unexpected end of text: missing ']'"),
                        _ => items.push(self.value(false)?),
                    }
                }
            }
            Some('"') => Ok(Value::Str(self.dquoted()?)),
            Some('\'') => Ok(Value::Str(self.squoted()?)),
            Some(c) if c.is_ascii_digit() || matches!(c, '+' | '-' | '.') => self.number(),
            Some(c) if !ends_word(c) && !matches!(c, '[' | ']' | ',') => {
                match bare_word(self.rest()) {
                    Ok((r, _)) => Ok(Value::Bare(Cow::Borrowed(self.take_until(r)))),
                    Err(_) => self.err("expected a value"),
                }
            }
            Some(c) => self.err(format!("unexpected {c:?} where a value belongs")),
            None => self.err("unexpected end of text: missing value"),
        }
    }

    fn number(&mut self) -> Result<Value<'a>, TextError> {
        let rest = self.rest();
        let sign = usize::from(matches!(rest.first(), Some(b'+' | b'-')));
        let (r, body) = match digits(&rest[sign..]) {
            Ok(x) => x,
            Err(_) => return self.err("expected a number"),
        };
        let dots = body.iter().filter(|&&b| b == b'.').count();
        let start = self.pos;
        let tok = self.take_until(r);
        if dots > 0 {
            if dots > 1 {
                self.pos = start;
                return self.err(format!("malformed number {tok:?}"));
            }
            return Ok(Value::Float(Cow::Borrowed(tok)));
        }
        match strtoll(tok) {
            Some(v) => Ok(Value::Int(v)),
            None => {
                self.pos = start;
                self.err(format!("integer {tok:?} is out of range"))
            }
        }
    }

    fn dquoted(&mut self) -> Result<Cow<'a, str>, TextError> {
        let body_start = self.pos + 1;
        let bytes = self.text.as_bytes();
        let mut i = body_start;
        let mut escaped = false;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                b'"' => {
                    let raw = &self.text[body_start..i.min(bytes.len())];
                    self.pos = i + 1;
                    return Ok(if escaped {
                        Cow::Owned(unescape(raw))
                    } else {
                        Cow::Borrowed(raw)
                    });
                }
                _ => i += 1,
            }
        }
        self.err("unterminated string")
    }

    fn squoted(&mut self) -> Result<Cow<'a, str>, TextError> {
        let body = &self.text[self.pos + 1..];
        match body.find('\'') {
            Some(end) => {
                self.pos += end + 2;
                Ok(Cow::Borrowed(&body[..end]))
            }
            None => self.err("unterminated string"),
        }
    }
}

/// libdm's unescaping: `\"` and `\\` lose their backslash; other sequences stay as written.
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
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
    out
}

/// C's `strtoll(tok, NULL, 0)` for the tokens the lexer produces (sign, digits), except that
/// overflow is an error instead of saturating.
fn strtoll(tok: &str) -> Option<i64> {
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

    fn first_value(t: &str) -> Value<'_> {
        let tree = parse(t).expect("parses");
        match &tree.nodes[0].body {
            Body::Value(v) => v.clone(),
            Body::Section(_) => panic!("not a value"),
        }
    }

    #[test]
    fn values() {
        assert_eq!(first_value("a = 12"), Value::Int(12));
        assert_eq!(first_value("a = -1"), Value::Int(-1));
        assert_eq!(first_value("a = 0100"), Value::Int(64));
        assert_eq!(first_value("a = 09"), Value::Int(0));
        assert_eq!(
            first_value("a = \"x\\\"y\\\\z\\n\""),
            Value::Str("x\"y\\z\\n".into())
        );
        assert_eq!(first_value("a = 'it\\'"), Value::Str("it\\".into()));
        assert_eq!(first_value("a = auto"), Value::Bare("auto".into()));
        assert_eq!(first_value("a = 1.5"), Value::Float("1.5".into()));
        assert_eq!(
            first_value("a = [\"pv0\", 0 \"pv1\" 4]"),
            Value::Array(vec![
                Value::Str("pv0".into()),
                Value::Int(0),
                Value::Str("pv1".into()),
                Value::Int(4)
            ])
        );
        assert_eq!(first_value("a = []"), Value::Array(vec![]));
    }

    #[test]
    fn sections_comments_and_nul() {
        let t =
            parse("vg {\n# c\n id = \"x\" # tail\n sub { k = 1 }\n}\ncontents = \"y\"\0garbage {")
                .expect("parses");
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[0].key, "vg");
        assert_eq!(t.nodes[0].section().map(|s| s.len()), Some(2));
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
        assert_eq!(
            first_value("a = -9223372036854775808"),
            Value::Int(i64::MIN)
        );
        assert!(parse("a = 9223372036854775808").is_err());
    }
}
