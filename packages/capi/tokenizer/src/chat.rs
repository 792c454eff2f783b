//! Chat templates, as riftco-text keeps them in the tokenizer state: for each role a
//! prefix and a suffix, the assistant role, the generation prompt, and an optional
//! tool-call syntax whose `tool_role` messages are wrapped in result markers.

use crate::error::{Error, Result};
use crate::json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleFormat {
    pub prefix: String,
    pub suffix: String,
}

/// The part of riftco-text's `ToolCallSyntax` that rendering content needs (tool-call
/// messages themselves are not rendered here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallSyntax {
    pub start: String,
    pub end: String,
    pub separator: String,
    pub tool_role: String,
    pub result_start: String,
    pub result_end: String,
}

impl ToolCallSyntax {
    const FIELDS: [&'static str; 6] = [
        "start",
        "end",
        "separator",
        "tool_role",
        "result_start",
        "result_end",
    ];

    fn default_syntax() -> Self {
        ToolCallSyntax {
            start: "<tool_call>".into(),
            end: "</tool_call>".into(),
            separator: "\n".into(),
            tool_role: "tool".into(),
            result_start: "<tool_response>".into(),
            result_end: "</tool_response>".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatTemplate {
    /// In the order of the state (the order of `stop_ids`).
    pub roles: Vec<(String, RoleFormat)>,
    pub generation_prompt: String,
    pub assistant_role: String,
    pub tool_call: Option<ToolCallSyntax>,
}

/// One span of a rendered conversation.
pub struct Span<'a> {
    pub text: std::borrow::Cow<'a, str>,
    pub is_template: bool,
    pub in_assistant_mask: bool,
}

fn string<'a>(value: &'a Value, where_: &str) -> Result<&'a str> {
    match value {
        Value::Str(s) => Ok(s),
        Value::BadStr => Err(Error::format(format!(
            "{where_}: expected valid Unicode; found an unpaired surrogate"
        ))),
        other => Err(Error::format(format!(
            "{where_}: expected a string; found {}",
            other.kind()
        ))),
    }
}

fn keys_exactly(value: &Value, where_: &str, expected: &[&str], optional: &[&str]) -> Result<()> {
    let Value::Object(pairs) = value else {
        return Err(Error::format(format!(
            "{where_}: expected an object; found {}",
            value.kind()
        )));
    };
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|k| value.get(k).is_none())
        .collect();
    let unexpected: Vec<&str> = pairs
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !expected.contains(k) && !optional.contains(k))
        .collect();
    if !missing.is_empty() || !unexpected.is_empty() {
        return Err(Error::format(format!(
            "{where_}: expected keys {expected:?}; missing {missing:?}, unexpected {unexpected:?}"
        )));
    }
    Ok(())
}

impl ChatTemplate {
    /// Read the `chat_template` object of a tokenizer state, checked as riftco-text does.
    pub fn from_state(state: &Value) -> Result<Self> {
        let at = "chat_template";
        keys_exactly(
            state,
            at,
            &["roles", "assistant_role", "generation_prompt"],
            &["tool_call"],
        )?;
        let Some(Value::Object(role_pairs)) = state.get("roles") else {
            return Err(Error::format(format!("{at}.roles: expected an object")));
        };
        if role_pairs.is_empty() {
            return Err(Error::format(format!(
                "{at}.roles: expected at least one role; found none"
            )));
        }
        let mut roles = Vec::new();
        for (role, fmt) in role_pairs {
            let where_ = format!("{at}.roles[{role:?}]");
            if role.is_empty() {
                return Err(Error::format(format!(
                    "{at}.roles: expected non-empty role names"
                )));
            }
            keys_exactly(fmt, &where_, &["prefix", "suffix"], &[])?;
            let prefix = string(
                fmt.get("prefix").expect("checked"),
                &format!("{where_}.prefix"),
            )?;
            let suffix = string(
                fmt.get("suffix").expect("checked"),
                &format!("{where_}.suffix"),
            )?;
            roles.push((
                role.clone(),
                RoleFormat {
                    prefix: prefix.into(),
                    suffix: suffix.into(),
                },
            ));
        }
        let generation_prompt = string(
            state.get("generation_prompt").expect("checked"),
            &format!("{at}.generation_prompt"),
        )?;
        let assistant_role = string(
            state.get("assistant_role").expect("checked"),
            &format!("{at}.assistant_role"),
        )?;
        let names: Vec<&str> = roles.iter().map(|(r, _)| r.as_str()).collect();
        if !names.contains(&assistant_role) {
            return Err(Error::format(format!(
                "{at}.assistant_role: expected one of the roles {names:?}; found {assistant_role:?}"
            )));
        }
        let tool_call = match state.get("tool_call") {
            // Left out: implied by the roles (the default syntax when a role is named "tool").
            None => names.contains(&"tool").then(ToolCallSyntax::default_syntax),
            Some(Value::Null) => None,
            Some(syntax) => Some(Self::syntax_from_state(syntax, &names)?),
        };
        if let Some(syntax) = &tool_call {
            if !names.contains(&syntax.tool_role.as_str()) {
                return Err(Error::format(format!(
                    "{at}.tool_call.tool_role: expected one of the roles {names:?}; found {:?}",
                    syntax.tool_role
                )));
            }
        }
        Ok(ChatTemplate {
            roles,
            generation_prompt: generation_prompt.into(),
            assistant_role: assistant_role.into(),
            tool_call,
        })
    }

    fn syntax_from_state(state: &Value, _roles: &[&str]) -> Result<ToolCallSyntax> {
        let at = "chat_template.tool_call";
        keys_exactly(state, at, &ToolCallSyntax::FIELDS, &[])?;
        let field = |name: &str| -> Result<String> {
            Ok(string(state.get(name).expect("checked"), &format!("{at}.{name}"))?.to_string())
        };
        let syntax = ToolCallSyntax {
            start: field("start")?,
            end: field("end")?,
            separator: field("separator")?,
            tool_role: field("tool_role")?,
            result_start: field("result_start")?,
            result_end: field("result_end")?,
        };
        if syntax.start.is_empty() || syntax.end.is_empty() {
            return Err(Error::format(format!(
                "{at}: expected non-empty start and end markers"
            )));
        }
        if syntax.start.contains('{')
            || [",", "}", "]", " "]
                .iter()
                .any(|p| syntax.end.starts_with(p))
        {
            return Err(Error::format(format!(
                "{at}: expected markers that cannot be read as part of the JSON call"
            )));
        }
        Ok(syntax)
    }

    /// Every template string in riftco-text's order: the generation prompt, then each
    /// role's prefix and suffix.
    pub fn template_strings(&self) -> Vec<(String, &str)> {
        let mut out = vec![(
            "generation_prompt".to_string(),
            self.generation_prompt.as_str(),
        )];
        for (role, fmt) in &self.roles {
            out.push((format!("{role}.prefix"), fmt.prefix.as_str()));
            out.push((format!("{role}.suffix"), fmt.suffix.as_str()));
        }
        out
    }

    pub fn role(&self, name: &str) -> Option<&RoleFormat> {
        self.roles.iter().find(|(r, _)| r == name).map(|(_, f)| f)
    }

    /// The conversation as spans (empty ones left out), as riftco-text renders
    /// `{"role", "content"}` messages.
    pub fn render<'a>(
        &'a self,
        messages: &[(&'a str, &'a str)],
        add_generation_prompt: bool,
    ) -> Result<Vec<Span<'a>>> {
        let mut spans = Vec::new();
        for (index, &(role, content)) in messages.iter().enumerate() {
            let Some(fmt) = self.role(role) else {
                let names: Vec<&str> = self.roles.iter().map(|(r, _)| r.as_str()).collect();
                return Err(Error::invalid(format!(
                    "message {index}: expected a role among {names:?}; found {role:?}"
                )));
            };
            let masked = role == self.assistant_role;
            let content: std::borrow::Cow<'a, str> = match &self.tool_call {
                Some(s) if s.tool_role == role => {
                    format!("{}{content}{}", s.result_start, s.result_end).into()
                }
                _ => content.into(),
            };
            spans.push(Span {
                text: fmt.prefix.as_str().into(),
                is_template: true,
                in_assistant_mask: false,
            });
            spans.push(Span {
                text: content,
                is_template: false,
                in_assistant_mask: masked,
            });
            spans.push(Span {
                text: fmt.suffix.as_str().into(),
                is_template: true,
                in_assistant_mask: masked,
            });
        }
        if add_generation_prompt {
            spans.push(Span {
                text: self.generation_prompt.as_str().into(),
                is_template: true,
                in_assistant_mask: false,
            });
        }
        spans.retain(|s| !s.text.is_empty());
        Ok(spans)
    }
}
