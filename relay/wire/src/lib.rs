//! Wire types of the relay: every body, event payload, header and error code that crosses the
//! relay's boundary. The relay and its agent-side clients (the agent worker) both use these, so
//! the contract is written once. Changing a type here changes the product's outside: treat it as
//! an API.

mod answer;
mod bodies;
mod error;
mod handles;
mod names;
mod secret;
#[cfg(feature = "session")]
pub mod session;
#[cfg(test)]
mod tests;
mod whole;

pub use answer::*;
pub use bodies::*;
pub use error::*;
pub use handles::*;
pub use names::*;
pub use secret::*;

/// Schemas of the fields that serde's types cannot say (an `ok` that is always `true` or always
/// `false`), and a touch to the generated documents.
#[cfg(feature = "openapi")]
pub mod openapi {
    use serde_json::Value;
    use utoipa::openapi::OpenApi;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::security::{
        ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme,
    };

    /// A credential an operation names in its `security`.
    pub enum Credential<'a> {
        /// `Authorization: Bearer …`, with an optional format (`JWT`).
        Bearer(&'a str, Option<&'a str>),
        /// A credential sent in the named header as it is.
        Header(&'a str, &'a str),
    }

    /// Adds the named credentials to the document's security schemes (both servers' documents
    /// describe theirs this one way).
    pub fn add_credentials(openapi: &mut OpenApi, credentials: &[(&str, Credential<'_>)]) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, credential) in credentials {
            let scheme = match credential {
                Credential::Bearer(description, format) => {
                    let mut http = HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(*description));
                    if let Some(format) = format {
                        http = http.bearer_format(*format);
                    }
                    SecurityScheme::Http(http.build())
                }
                Credential::Header(header, description) => SecurityScheme::ApiKey(ApiKey::Header(
                    ApiKeyValue::with_description(*header, *description),
                )),
            };
            components.add_security_scheme(*name, scheme);
        }
    }

    /// `true`, always (the `ok` of every success body).
    pub fn always_true() -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([true]))
    }

    /// `false`, always (the `ok` of every failure body).
    pub fn always_false() -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([false]))
    }

    /// utoipa writes an optional body as `oneOf: [null, T]`; an absent body is what is optional.
    pub fn drop_null_bodies(doc: &mut Value) {
        let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
            return;
        };
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in operation.values_mut() {
                let Some(content) = op
                    .pointer_mut("/requestBody/content")
                    .and_then(Value::as_object_mut)
                else {
                    continue;
                };
                for media in content.values_mut() {
                    let Some(schema) = media.get_mut("schema") else {
                        continue;
                    };
                    let alternatives = schema.get("oneOf").and_then(Value::as_array);
                    if let Some([first, second]) = alternatives.map(Vec::as_slice)
                        && first.get("type") == Some(&Value::from("null"))
                    {
                        *schema = second.clone();
                    }
                }
            }
        }
    }
}
