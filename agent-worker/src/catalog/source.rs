//! Reading a catalog file: JSON (comments and trailing commas allowed), parsed with every
//! value's position kept, so that a problem found later is named with its line and column and
//! its path in the document (`tools[2].timeoutMs`).

use std::fmt;

use jsonc_parser::ast;
use jsonc_parser::common::Ranged;
use serde_json::Value;

/// Where a problem is: the file, the path in the document, and the line and column of that
/// value when it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: String,
    /// The path in the document, `tools[2].timeoutMs`; empty for the whole document.
    pub path: String,
    /// 1-based line and column.
    pub line: Option<(usize, usize)>,
}

/// One thing wrong with a catalog, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub place: Place,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = &self.place;
        write!(f, "{}", place.file)?;
        if let Some((line, column)) = place.line {
            write!(f, ":{line}:{column}")?;
        }
        if !place.path.is_empty() {
            write!(f, ": {}", place.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A step of a path in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Field(String),
    Index(usize),
}

/// A field step.
pub fn field(name: &str) -> Step {
    Step::Field(name.to_owned())
}

/// A parsed catalog document: its values, and where each one is in the text.
pub struct Document<'a> {
    pub file: String,
    pub value: Value,
    text: &'a str,
    ast: Option<ast::Value<'a>>,
}

/// The parser accepts what people write in hand-edited JSON files (comments, trailing commas)
/// and nothing that would make the file mean something else elsewhere.
fn parse_options() -> jsonc_parser::ParseOptions {
    jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    }
}

impl<'a> Document<'a> {
    /// Parses `text`; a syntax error is one problem with its line and column.
    pub fn parse(file: &str, text: &'a str) -> Result<Document<'a>, Problem> {
        let parsed = jsonc_parser::parse_to_ast(text, &Default::default(), &parse_options())
            .map_err(|e| Problem {
                place: Place {
                    file: file.to_owned(),
                    path: String::new(),
                    line: Some((e.line_display(), e.column_display())),
                },
                message: format!("not valid JSON: {}", e.kind()),
            })?;
        let Some(ast) = parsed.value else {
            return Err(Problem {
                place: Place {
                    file: file.to_owned(),
                    path: String::new(),
                    line: None,
                },
                message: "the file is empty".into(),
            });
        };
        let value = Value::from(ast.clone());
        Ok(Document {
            file: file.to_owned(),
            value,
            text,
            ast: Some(ast),
        })
    }

    /// The place of the value at `path` (or of its nearest ancestor that exists).
    pub fn place(&self, path: &[Step]) -> Place {
        let mut node = self.ast.as_ref();
        let mut found = node.map(|n| n.range().start);
        for step in path {
            node = match (node, step) {
                (Some(ast::Value::Object(o)), Step::Field(name)) => o.get(name).map(|p| &p.value),
                (Some(ast::Value::Array(a)), Step::Index(i)) => a.elements.get(*i),
                _ => None,
            };
            match node {
                Some(n) => found = Some(n.range().start),
                None => break,
            }
        }
        Place {
            file: self.file.clone(),
            path: render(path),
            line: found.map(|offset| line_and_column(self.text, offset)),
        }
    }

    /// A problem at `path`.
    pub fn problem(&self, path: &[Step], message: impl Into<String>) -> Problem {
        Problem {
            place: self.place(path),
            message: message.into(),
        }
    }
}

/// `tools[2].timeoutMs`.
pub fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_name_line_column_and_path() {
        let text = "{\n  // a comment\n  \"tools\": [\n    {\"name\": \"a\"},\n    {\"name\": 5,},\n  ],\n}\n";
        let doc = Document::parse("c.json", text).unwrap();
        let place = doc.place(&[field("tools"), Step::Index(1), field("name")]);
        assert_eq!(place.line, Some((5, 14)));
        assert_eq!(place.path, "tools[1].name");
        // A path that does not exist points at its nearest ancestor.
        let missing = doc.place(&[field("tools"), Step::Index(0), field("x")]);
        assert_eq!(missing.line, Some((4, 5)));
        let p = doc.problem(&[field("tools")], "bad");
        assert_eq!(p.to_string(), "c.json:3:12: tools: bad");
    }

    #[test]
    fn syntax_errors_have_their_line() {
        let err = Document::parse("c.json", "{\n  \"tools\": [\n    {'name': 1}\n  ]\n}")
            .err()
            .unwrap();
        assert_eq!(err.place.line.map(|l| l.0), Some(3), "{err}");
        assert!(err.to_string().starts_with("c.json:3:"), "{err}");
        assert!(Document::parse("c.json", "  ").is_err());
    }
}
