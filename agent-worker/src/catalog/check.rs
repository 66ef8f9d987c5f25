//! The catalog checked as a whole: the document's shape, each mode and each tool, and how they
//! fit together (unknown or duplicate modes and tools, moves that name no mode, modes no move
//! reaches). Every problem is collected, each with its place, so one run lists them all.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use relay_wire::TOOL_FIELDS;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::source::{Document, Problem, Step, field};
use super::tool::{Tool, ToolSpec};
use super::{Catalog, IMPLICIT_MODE, Mode, Move};

/// The longest mode id: `enter_<id>` and `leave_<id>` must be tool names (64 characters).
pub const MAX_MODE_ID: usize = 58;

/// A mode as the file declares it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeDef {
    id: String,
    #[serde(default)]
    instructions: String,
    #[serde(default)]
    next: Vec<String>,
    #[serde(default)]
    nested: bool,
}

/// True when `id` can name a mode: a mode id the relay accepts (letters, digits, `_` and `-`),
/// short enough for its moves (`enter_<id>` is a tool name of at most 64 characters).
pub fn is_mode_id(id: &str) -> bool {
    relay_wire::is_mode_id(id) && id.len() <= MAX_MODE_ID
}

/// The fields a mode may have.
const MODE_FIELDS: [&str; 4] = ["id", "instructions", "next", "nested"];

struct Checker<'d, 'a> {
    doc: &'d Document<'a>,
    problems: Vec<Problem>,
}

impl Checker<'_, '_> {
    fn at(&mut self, path: &[Step], message: impl Into<String>) {
        let problem = self.doc.problem(path, message);
        self.problems.push(problem);
    }

    /// Reports every field of the object at `path` that is not one of `known` (each at its
    /// place), and answers the object without them, so the rest of it is checked too.
    fn known_fields(&mut self, path: &[Step], raw: &Value, known: &[&str], what: &str) -> Value {
        let Some(object) = raw.as_object() else {
            return raw.clone();
        };
        let mut kept = Map::new();
        for (name, value) in object {
            if known.contains(&name.as_str()) {
                kept.insert(name.clone(), value.clone());
            } else {
                let mut at = path.to_vec();
                at.push(field(name));
                self.at(
                    &at,
                    format!("is not a {what} field (expected {})", known.join(", ")),
                );
            }
        }
        Value::Object(kept)
    }
}

pub(super) fn check(file: &str, text: &str) -> Result<Catalog, Vec<Problem>> {
    let doc = Document::parse(file, text).map_err(|p| vec![p])?;
    let mut c = Checker {
        doc: &doc,
        problems: Vec::new(),
    };
    let Some(root) = doc.value.as_object() else {
        c.at(
            &[],
            "must be a JSON object with \"tools\" (and optionally \"modes\" and \"initialMode\")",
        );
        return Err(c.problems);
    };
    for key in root.keys() {
        if !["initialMode", "modes", "tools"].contains(&key.as_str()) {
            c.at(
                &[field(key)],
                "is not a catalog field (expected initialMode, modes, tools)",
            );
        }
    }
    let (modes, initial) = check_modes(&mut c, root);
    let tools = check_tools(&mut c, root, &modes);
    if !c.problems.is_empty() {
        // In the file's order, as an editor lists them (those without a line first).
        c.problems.sort_by_key(|p| p.place.line);
        return Err(c.problems);
    }
    Ok(Catalog {
        source: file.to_owned(),
        initial: initial.unwrap_or_else(|| IMPLICIT_MODE.to_owned()),
        modes,
        tools,
    })
}

/// The modes (by id) and the initial one.
fn check_modes(
    c: &mut Checker<'_, '_>,
    root: &Map<String, Value>,
) -> (BTreeMap<String, Mode>, Option<String>) {
    let initial = match root.get("initialMode") {
        None => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => {
            c.at(&[field("initialMode")], "must be a mode id (a string)");
            None
        }
    };
    let list = match root.get("modes") {
        None => {
            // No modes declared: one mode, and every tool is in it.
            if let Some(id) = initial.as_deref().filter(|id| *id != IMPLICIT_MODE) {
                c.at(
                    &[field("initialMode")],
                    format!("names {id:?}, but the catalog declares no modes"),
                );
            }
            let mode = Mode {
                id: IMPLICIT_MODE.to_owned(),
                instructions: String::new(),
                next: Vec::new(),
                nested: false,
            };
            return (
                BTreeMap::from([(IMPLICIT_MODE.to_owned(), mode)]),
                Some(IMPLICIT_MODE.to_owned()),
            );
        }
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(_) => {
            c.at(&[field("modes")], "must be a non-empty array of modes");
            return (BTreeMap::new(), initial);
        }
    };
    let mut modes: BTreeMap<String, Mode> = BTreeMap::new();
    let mut order: Vec<(usize, String)> = Vec::new();
    for (i, raw) in list.iter().enumerate() {
        let here = || vec![field("modes"), Step::Index(i)];
        let raw = c.known_fields(&here(), raw, &MODE_FIELDS, "mode");
        let def: ModeDef = match serde_json::from_value(raw) {
            Ok(def) => def,
            Err(e) => {
                c.at(&here(), format!("is not a mode: {e}"));
                continue;
            }
        };
        let mut id_path = here();
        id_path.push(field("id"));
        if !is_mode_id(&def.id) {
            c.at(
                &id_path,
                format!(
                    "{:?} is not a mode id: 1 to {MAX_MODE_ID} letters, digits, _ or -",
                    def.id
                ),
            );
            continue;
        }
        if let Some((first, _)) = order.iter().find(|(_, id)| *id == def.id) {
            c.at(
                &id_path,
                format!(
                    "mode {:?} is declared twice (first at modes[{first}])",
                    def.id
                ),
            );
            continue;
        }
        order.push((i, def.id.clone()));
        modes.insert(
            def.id.clone(),
            Mode {
                id: def.id,
                instructions: def.instructions,
                next: def.next,
                nested: def.nested,
            },
        );
    }
    for (i, id) in &order {
        let mode = &modes[id];
        let mut seen = BTreeSet::new();
        for (j, next) in mode.next.iter().enumerate() {
            let at = [
                field("modes"),
                Step::Index(*i),
                field("next"),
                Step::Index(j),
            ];
            if !modes.contains_key(next) {
                c.at(&at, format!("names mode {next:?}, which is not declared"));
            } else if next == id {
                c.at(&at, format!("mode {id:?} cannot move to itself"));
            } else if !seen.insert(next) {
                c.at(&at, format!("lists {next:?} twice"));
            }
        }
    }
    let initial = match initial {
        Some(id) if modes.contains_key(&id) => id,
        Some(id) => {
            c.at(
                &[field("initialMode")],
                format!("names mode {id:?}, which is not declared"),
            );
            return (modes, None);
        }
        // The first mode listed, when none is named.
        None => match order.first() {
            Some((_, id)) => id.clone(),
            None => return (modes, None),
        },
    };
    // Every mode must be reachable from the initial one through `next`.
    let mut reached = BTreeSet::from([initial.clone()]);
    let mut queue = VecDeque::from([initial.clone()]);
    while let Some(id) = queue.pop_front() {
        for next in &modes[&id].next {
            if modes.contains_key(next) && reached.insert(next.clone()) {
                queue.push_back(next.clone());
            }
        }
    }
    for (i, id) in &order {
        if !reached.contains(id) {
            c.at(
                &[field("modes"), Step::Index(*i), field("id")],
                format!(
                    "mode {id:?} is unreachable: no chain of \"next\" leads to it from the \
                     initial mode {initial:?}"
                ),
            );
        }
    }
    (modes, Some(initial))
}

/// The tools, compiled, in the file's order.
fn check_tools(
    c: &mut Checker<'_, '_>,
    root: &Map<String, Value>,
    modes: &BTreeMap<String, Mode>,
) -> Vec<Tool> {
    let list = match root.get("tools") {
        Some(Value::Array(list)) => list,
        None => {
            c.at(&[], "has no \"tools\" array");
            return Vec::new();
        }
        Some(_) => {
            c.at(&[field("tools")], "must be an array of tools");
            return Vec::new();
        }
    };
    let mut tools: Vec<Tool> = Vec::new();
    let mut names: Vec<(usize, String)> = Vec::new();
    for (i, raw) in list.iter().enumerate() {
        let at = |rest: &[Step]| {
            let mut p = vec![field("tools"), Step::Index(i)];
            p.extend_from_slice(rest);
            p
        };
        let unknown_before = c.problems.len();
        let mut raw = c.known_fields(&at(&[]), raw, &TOOL_FIELDS, "tool");
        // Each missing field is named, and stands in so that the rest of the tool is checked
        // too (the tool is refused for what is missing).
        if let Some(object) = raw.as_object_mut() {
            let stand_ins = [
                ("name", Value::String(format!("tool{i}"))),
                ("description", Value::String("-".into())),
                ("parameters", serde_json::json!({"type": "object"})),
            ];
            for (name, stand_in) in stand_ins {
                if !object.contains_key(name) {
                    c.at(
                        &at(&[]),
                        format!(
                            "has no {name} (a tool needs a name, a description and parameters)"
                        ),
                    );
                    object.insert(name.to_owned(), stand_in);
                }
            }
        }
        let spec: ToolSpec = match serde_json::from_value(raw) {
            Ok(spec) => spec,
            Err(e) => {
                c.at(&at(&[]), format!("is not a tool: {e}"));
                continue;
            }
        };
        let name = spec.name.clone();
        let tag = format!(" (tool {name:?})");
        let mut fine = c.problems.len() == unknown_before;
        if let Some((first, _)) = names.iter().find(|(_, n)| *n == name) {
            c.at(
                &at(&[field("name")]),
                format!("tool {name:?} is declared twice (first at tools[{first}])"),
            );
            fine = false;
        }
        match Move::of(&name) {
            Some(Move::Enter(id)) | Some(Move::Leave(id)) if modes.contains_key(id) => {
                c.at(
                    &at(&[field("name")]),
                    format!("{name:?} is the name of a move of mode {id:?}; pick another"),
                );
                fine = false;
            }
            _ => {}
        }
        if let Some(listed) = &spec.modes {
            if listed.is_empty() {
                c.at(
                    &at(&[field("modes")]),
                    format!("lists no mode: the tool would never be offered{tag}"),
                );
                fine = false;
            }
            for (j, mode) in listed.iter().enumerate() {
                if !modes.contains_key(mode) {
                    c.at(
                        &at(&[field("modes"), Step::Index(j)]),
                        format!("names mode {mode:?}, which is not declared{tag}"),
                    );
                    fine = false;
                }
            }
        }
        names.push((i, name));
        match Tool::compile(spec) {
            Ok(tool) if fine => tools.push(tool),
            Ok(_) => {}
            Err(shape) => {
                for problem in shape {
                    c.at(
                        &at(&[field(problem.field)]),
                        format!("{}{tag}", problem.message),
                    );
                }
            }
        }
    }
    tools
}
