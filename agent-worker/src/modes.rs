//! Session modes: each mode packages the instructions an agent runs with and, through the tool
//! registry, the tools it may call. A small stack (depth 2) lets a session enter a nested mode
//! and come back, as voice sessions move through phases.

use std::collections::BTreeMap;

use crate::client::ToolError;
use crate::tools::{Registry, ToolSpec};

/// A mode: an id, the instructions the agent gets in it, and the modes it may move to. Its tools
/// are the registry's tools that list this id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mode {
    pub id: String,
    pub instructions: String,
    /// The modes a session in this one may enter; each is offered to the agent as a tool
    /// (`enter_<mode>`).
    pub next: Vec<String>,
}

/// The prefix of the tools that move a session to another mode.
pub const ENTER_PREFIX: &str = "enter_";

/// The tool that enters `mode`.
pub fn enter_tool_name(mode: &str) -> String {
    format!("{ENTER_PREFIX}{mode}")
}

/// The modes a deployment knows, with the one a session starts in.
#[derive(Debug, Clone)]
pub struct ModeSet {
    modes: BTreeMap<String, Mode>,
    initial: String,
}

impl ModeSet {
    pub fn new(initial: &str, modes: impl IntoIterator<Item = Mode>) -> Result<Self, String> {
        let modes: BTreeMap<String, Mode> = modes.into_iter().map(|m| (m.id.clone(), m)).collect();
        if !modes.contains_key(initial) {
            return Err(format!("initial mode {initial} is not defined"));
        }
        for mode in modes.values() {
            if let Some(unknown) = mode.next.iter().find(|n| !modes.contains_key(*n)) {
                return Err(format!(
                    "mode {} moves to {unknown}, which is not defined",
                    mode.id
                ));
            }
            if !relay_wire::is_tool_name(&enter_tool_name(&mode.id)) {
                return Err(format!("{:?} cannot be a mode id", mode.id));
            }
        }
        Ok(ModeSet {
            modes,
            initial: initial.to_owned(),
        })
    }

    pub fn get(&self, id: &str) -> Option<&Mode> {
        self.modes.get(id)
    }

    pub fn initial(&self) -> &str {
        &self.initial
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.modes.keys().map(String::as_str)
    }

    /// A fresh stack in the initial mode.
    pub fn stack(&self) -> ModeStack {
        ModeStack {
            active: self.initial.clone(),
            previous: None,
        }
    }
}

/// Where a session is: the active mode and, when it entered a nested one, the mode to return to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeStack {
    active: String,
    previous: Option<String>,
}

/// What a voice pipeline applies when the mode changes: the instructions and the tools.
#[derive(Debug, Clone)]
pub struct SessionUpdate<'a> {
    pub mode: &'a Mode,
    pub tools: Vec<&'a ToolSpec>,
}

impl ModeStack {
    pub fn active(&self) -> &str {
        &self.active
    }

    pub fn previous(&self) -> Option<&str> {
        self.previous.as_deref()
    }

    /// Enters `mode`; with `save_previous` the current mode is kept to return to (depth 2: a
    /// second save replaces the first).
    pub fn enter(
        &mut self,
        modes: &ModeSet,
        mode: &str,
        save_previous: bool,
    ) -> Result<(), String> {
        if modes.get(mode).is_none() {
            return Err(format!("unknown mode {mode}"));
        }
        let old = std::mem::replace(&mut self.active, mode.to_owned());
        self.previous = save_previous.then_some(old);
        Ok(())
    }

    /// Returns to the saved mode, or to the initial one when none was saved.
    pub fn exit(&mut self, modes: &ModeSet) {
        self.active = self
            .previous
            .take()
            .unwrap_or_else(|| modes.initial().to_owned());
    }

    /// The current mode's instructions and tools, to push to the voice session (after a mode
    /// change, or when context changed).
    pub fn update<'a>(&self, modes: &'a ModeSet, registry: &'a Registry) -> SessionUpdate<'a> {
        let mode = modes
            .get(&self.active)
            .or_else(|| modes.get(modes.initial()))
            .expect("the initial mode exists");
        SessionUpdate {
            mode,
            tools: registry.for_mode(&mode.id).collect(),
        }
    }

    /// The mode a session in the active mode enters with the tool `tool`, when `tool` is one of
    /// its mode changes.
    pub fn change_for<'a>(&self, modes: &'a ModeSet, tool: &str) -> Option<&'a Mode> {
        let target = tool.strip_prefix(ENTER_PREFIX)?;
        let active = modes.get(&self.active)?;
        active
            .next
            .iter()
            .any(|n| n == target)
            .then(|| modes.get(target))?
    }

    /// Refuses a tool the active mode does not offer.
    pub fn check(&self, registry: &Registry, tool: &str) -> Result<(), ToolError> {
        let spec = registry.get(tool).ok_or_else(|| {
            ToolError::new("unknown_tool", format!("there is no tool named {tool}"))
        })?;
        if spec.modes.iter().any(|m| m == &self.active) {
            Ok(())
        } else {
            Err(ToolError::new(
                "tool_not_allowed",
                format!("{tool} is not available in the {} mode", self.active),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolsets;

    #[test]
    fn tarot_phases_allocate_tools_as_the_seed_says() {
        let registry = toolsets::registry();
        let modes = toolsets::modes();
        let mut stack = modes.stack();
        assert_eq!(stack.active(), "default");
        let tools = |stack: &ModeStack| -> Vec<String> {
            stack
                .update(&modes, &registry)
                .tools
                .iter()
                .map(|t| t.name.clone())
                .collect()
        };
        assert_eq!(
            tools(&stack),
            ["OpenPopover", "loading_status", "present_to_cassette"]
        );
        stack.enter(&modes, "intent", true).unwrap();
        assert!(tools(&stack).is_empty());
        stack.enter(&modes, "spread", false).unwrap();
        assert_eq!(tools(&stack), ["draw_card"]);
        assert_eq!(
            stack.check(&registry, "show_card").unwrap_err().code,
            "tool_not_allowed"
        );
        stack.enter(&modes, "reading", false).unwrap();
        assert_eq!(tools(&stack), ["show_card"]);
        stack.enter(&modes, "followup", false).unwrap();
        assert_eq!(tools(&stack), ["draw_card", "show_card"]);
        assert!(stack.check(&registry, "draw_card").is_ok());
        assert_eq!(
            stack.check(&registry, "nope").unwrap_err().code,
            "unknown_tool"
        );
        stack.exit(&modes);
        assert_eq!(stack.active(), "default");
    }

    #[test]
    fn stack_saves_one_level() {
        let modes = toolsets::modes();
        let mut stack = modes.stack();
        stack.enter(&modes, "spread", true).unwrap();
        stack.enter(&modes, "reading", true).unwrap();
        assert_eq!(stack.previous(), Some("spread"));
        stack.exit(&modes);
        assert_eq!(stack.active(), "spread");
        stack.exit(&modes);
        assert_eq!(stack.active(), "default");
        assert!(stack.enter(&modes, "nowhere", true).is_err());
        assert_eq!(stack.active(), "default");
    }
}
