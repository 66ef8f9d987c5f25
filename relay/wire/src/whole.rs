//! A count in a request body, read as JSON Schema reads `integer`: `1232` and `1232.0` are the
//! same number (JSON has one number type), a fraction or a negative is not a count.

use serde::{Deserialize, Deserializer};

/// Deserializes an optional whole, non-negative number into `u64`.
pub fn optional<'de, D: Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(de)? else {
        return Ok(None);
    };
    if let Some(v) = n.as_u64() {
        return Ok(Some(v));
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&f) => Ok(Some(f as u64)),
        _ => Err(serde::de::Error::custom(format!(
            "{n} is not a whole number of zero or more"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "super::optional")]
        n: Option<u64>,
    }

    fn n(json: &str) -> Result<Option<u64>, String> {
        serde_json::from_str::<Body>(json)
            .map(|b| b.n)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_in_either_form() {
        assert_eq!(n(r#"{"n": 1232}"#), Ok(Some(1232)));
        assert_eq!(n(r#"{"n": 1232.0}"#), Ok(Some(1232)));
        assert_eq!(n(r#"{"n": 1.2e3}"#), Ok(Some(1200)));
        assert_eq!(n(r#"{"n": null}"#), Ok(None));
        assert_eq!(n(r#"{}"#), Ok(None));
        for bad in [
            r#"{"n": 1.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": "1"}"#,
            r#"{"n": 1e300}"#,
        ] {
            assert!(n(bad).is_err(), "{bad}");
        }
    }
}
