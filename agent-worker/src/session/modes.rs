//! Where a session is among the catalog's modes: the active mode and, after entering a nested
//! mode, the one to return to (a stack of depth two: entering a second nested mode replaces the
//! saved one).

use crate::catalog::{Catalog, Mode, Move};

/// The active mode and the saved one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeStack {
    active: String,
    previous: Option<String>,
}

impl ModeStack {
    /// A stack in the catalog's initial mode.
    pub fn new(catalog: &Catalog) -> Self {
        ModeStack {
            active: catalog.initial_mode().to_owned(),
            previous: None,
        }
    }

    pub fn active(&self) -> &str {
        &self.active
    }

    pub fn previous(&self) -> Option<&str> {
        self.previous.as_deref()
    }

    /// The active mode in `catalog` (the initial one if the catalog no longer has it).
    pub fn mode<'c>(&self, catalog: &'c Catalog) -> &'c Mode {
        catalog
            .mode(&self.active)
            .or_else(|| catalog.mode(catalog.initial_mode()))
            .expect("a checked catalog has its initial mode")
    }

    /// The moves the active mode offers: into each of its `next` modes, and back out of a
    /// nested mode to the saved one.
    pub fn moves<'c>(&'c self, catalog: &'c Catalog) -> Vec<(Move<'c>, &'c Mode)> {
        let mode = self.mode(catalog);
        let mut moves: Vec<(Move<'c>, &'c Mode)> = mode
            .next
            .iter()
            .filter_map(|id| catalog.mode(id).map(|m| (Move::Enter(m.id.as_str()), m)))
            .collect();
        if let Some(back) = self.previous.as_deref().and_then(|id| catalog.mode(id)) {
            moves.push((Move::Leave(mode.id.as_str()), back));
        }
        moves
    }

    /// Applies the move `tool` names when the active mode offers it; the new active mode.
    pub fn apply(&mut self, catalog: &Catalog, tool: &str) -> Option<String> {
        let wanted = Move::of(tool)?;
        let target = self
            .moves(catalog)
            .into_iter()
            .find(|(m, _)| *m == wanted)
            .map(|(m, target)| {
                (
                    matches!(m, Move::Enter(_)),
                    target.id.clone(),
                    target.nested,
                )
            })?;
        let (entering, id, nested) = target;
        if entering {
            self.enter(id.clone(), nested);
        } else {
            self.active = id.clone();
            self.previous = None;
        }
        Some(id)
    }

    /// Enters `id`; a nested mode keeps the mode it came from.
    pub fn enter(&mut self, id: String, nested: bool) {
        let from = std::mem::replace(&mut self.active, id);
        self.previous = nested.then_some(from);
    }

    /// After the catalog changed: a mode it no longer has is left for the initial one. True
    /// when the stack changed.
    pub fn fit(&mut self, catalog: &Catalog) -> bool {
        let before = self.clone();
        if catalog.mode(&self.active).is_none() {
            self.active = catalog.initial_mode().to_owned();
            self.previous = None;
        }
        if self
            .previous
            .as_deref()
            .is_some_and(|id| catalog.mode(id).is_none() || !self.nested(catalog))
        {
            self.previous = None;
        }
        *self != before
    }

    fn nested(&self, catalog: &Catalog) -> bool {
        catalog.mode(&self.active).is_some_and(|m| m.nested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        let doc = json!({
            "initialMode": "default",
            "modes": [
                {"id": "default", "next": ["game", "conference"]},
                {"id": "conference", "next": ["game", "default"]},
                {"id": "game", "next": ["quiz"], "nested": true},
                {"id": "quiz", "next": [], "nested": true}
            ],
            "tools": []
        });
        Catalog::parse("modes.json", &doc.to_string()).unwrap()
    }

    fn names(stack: &ModeStack, catalog: &Catalog) -> Vec<String> {
        stack
            .moves(catalog)
            .iter()
            .map(|(m, _)| m.tool_name())
            .collect()
    }

    #[test]
    fn a_nested_mode_returns_to_the_one_before() {
        let catalog = catalog();
        let mut stack = ModeStack::new(&catalog);
        assert_eq!(names(&stack, &catalog), ["enter_game", "enter_conference"]);
        assert_eq!(
            stack.apply(&catalog, "enter_conference").as_deref(),
            Some("conference")
        );
        assert_eq!(stack.apply(&catalog, "enter_game").as_deref(), Some("game"));
        assert_eq!(stack.previous(), Some("conference"));
        assert_eq!(names(&stack, &catalog), ["enter_quiz", "leave_game"]);
        assert_eq!(
            stack.apply(&catalog, "leave_game").as_deref(),
            Some("conference")
        );
        assert_eq!(stack.previous(), None);
        assert!(
            stack.apply(&catalog, "leave_game").is_none(),
            "nothing to leave"
        );
        assert!(
            stack.apply(&catalog, "enter_quiz").is_none(),
            "not a move from here"
        );
        assert!(stack.apply(&catalog, "enter_nowhere").is_none());
    }

    #[test]
    fn the_stack_holds_one_level() {
        let catalog = catalog();
        let mut stack = ModeStack::new(&catalog);
        stack.apply(&catalog, "enter_game").unwrap();
        stack.apply(&catalog, "enter_quiz").unwrap();
        // Depth two: the saved mode is now game, and default is forgotten.
        assert_eq!(stack.previous(), Some("game"));
        stack.apply(&catalog, "leave_quiz").unwrap();
        assert_eq!(stack.active(), "game");
        assert_eq!(names(&stack, &catalog), ["enter_quiz"]);
    }

    #[test]
    fn a_reloaded_catalog_without_the_mode_sends_the_session_home() {
        let catalog = catalog();
        let mut stack = ModeStack::new(&catalog);
        stack.apply(&catalog, "enter_game").unwrap();
        let smaller = Catalog::parse(
            "small.json",
            &json!({"modes": [{"id": "default"}], "tools": []}).to_string(),
        )
        .unwrap();
        assert!(stack.fit(&smaller));
        assert_eq!(stack.active(), "default");
        assert_eq!(stack.previous(), None);
        assert!(!stack.fit(&smaller));
    }
}
