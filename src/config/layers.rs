//! The layers under the command line: the TOML file, and `KVTIER_…` environment variables
//! merged over it (the known top-level variables by the `config` crate; an adapter's own
//! variables by `apply_adapter_env`, after its JSON string is parsed).
//!
//! Invariant: a higher layer replaces a field of a lower one and leaves its other fields; the
//! merged value is then parsed strictly (parse.rs), so a variable is checked as the file is.

use super::*;

/// Merges defaults, the file and the top-level environment variables with the `config` crate.
pub(super) fn merge_layers(
    file: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<Value, ConfigError> {
    use config::{Config, Environment, File, FileFormat};
    let file_err = |path: &Path, e: config::ConfigError| ConfigError::File {
        path: path.display().to_string(),
        message: without_source_lines(&e.to_string()),
    };
    // Only the known top-level variables: other KVTIER_* names (KVTIER_LOG, test tooling) are
    // not configuration. Per-adapter overrides are applied by `apply_adapter_env`, after JSON
    // strings are parsed.
    let top_env: HashMap<String, String> = env
        .iter()
        .filter(|(k, _)| ENV_VARS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut builder = Config::builder();
    if let Some(path) = file {
        if !path.is_file() {
            return Err(ConfigError::File {
                path: path.display().to_string(),
                message: "no such file".into(),
            });
        }
        builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true));
    }
    builder = builder.add_source(
        Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(top_env.into_iter().collect())),
    );
    let cfg = builder.build().map_err(|e| match file {
        Some(p) => file_err(p, e),
        None => ConfigError::Field {
            field: "?".into(),
            message: e.to_string(),
        },
    })?;
    cfg.try_deserialize::<Value>()
        .map_err(|e| ConfigError::Field {
            field: "?".into(),
            message: e.to_string(),
        })
}

/// Applies `KVTIER_ADAPTERS__<i>__<FIELD>[__<SUBFIELD>]` overrides. Values are read as JSON
/// scalars when they parse as such (`5`, `0.5`, `true`), else as strings; quote a string that
/// looks like a number (`'"5"'`).
pub(super) fn apply_adapter_env(
    objects: &mut [Value],
    env: &HashMap<String, String>,
) -> Result<(), ConfigError> {
    let mut vars: Vec<(&String, &String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("KVTIER_ADAPTERS__"))
        .collect();
    vars.sort();
    for (var, raw) in vars {
        let env_err = |message: String| ConfigError::Env {
            var: var.clone(),
            message,
        };
        let path: Vec<String> = var["KVTIER_ADAPTERS__".len()..]
            .split("__")
            .map(str::to_lowercase)
            .collect();
        let index: usize = path[0]
            .parse()
            .map_err(|_| env_err(format!("{:?} is not an adapter index", path[0])))?;
        if path.len() < 2 || path[1..].iter().any(String::is_empty) {
            return Err(env_err("expected KVTIER_ADAPTERS__<index>__<field>".into()));
        }
        let Some(target) = objects.get_mut(index) else {
            return Err(env_err(format!(
                "there is no adapter #{index} (there are {})",
                objects.len()
            )));
        };
        let value = match serde_json::from_str::<Value>(raw) {
            Ok(v @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Null)) => v,
            _ => Value::String(raw.clone()),
        };
        let mut node = target;
        for (depth, seg) in path[1..].iter().enumerate() {
            let Value::Object(m) = node else {
                return Err(env_err(format!("adapter #{index} is not a table")));
            };
            if depth == path.len() - 2 {
                m.insert(seg.clone(), value);
                break;
            }
            node = m
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    Ok(())
}
