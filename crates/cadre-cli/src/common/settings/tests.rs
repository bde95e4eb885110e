use super::file::Value;
use super::*;
use crate::args::Source;
use crate::common::exit::CliError;

fn read_err(text: &str) -> String {
    read(text).unwrap_err().report()
}

fn read(text: &str) -> Result<SettingsFile, CliError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(PROJECT_FILE);
    std::fs::write(&path, text).unwrap();
    SettingsFile::read(&path, "cadre.toml".into())
}

#[test]
fn every_file_key_is_applied_and_shown() {
    // A sample value for each key; a new row needs one here, and arms in `apply` and
    // `shown_setting`, or this fails.
    let sample = |key: &str| match key {
        "provider" => "\"openai\"",
        "model" => "\"sample-model\"",
        "base_url" => "\"http://127.0.0.1:9\"",
        "mcp_config" => "\"servers.json\"",
        "mcp.allow_env" => "[\"SAMPLE\"]",
        "compaction.compact_at" => "123456",
        k if k.starts_with("limits.") => "7",
        "telemetry.endpoint" => "\"http://127.0.0.1:4318\"",
        "telemetry.protocol" => "\"grpc\"",
        "telemetry.headers" => "{ api-key = \"secret\" }",
        "telemetry.service_name" => "\"sample\"",
        "telemetry.resource_attributes" => "\"team=core\"",
        k if k.starts_with("telemetry.") => "true",
        other => panic!(
            "no sample value for `{other}`: add one here, and its arms in apply and shown_setting"
        ),
    };
    let keys: Vec<&str> = known_keys()
        .filter(|k| !k.starts_with("permissions."))
        .collect();
    let mut text = String::new();
    let mut table = "";
    for key in &keys {
        let (t, name) = key.split_once('.').unwrap_or(("", key));
        if t != table {
            text.push_str(&format!("[{t}]\n"));
            table = t;
        }
        text.push_str(&format!("{name} = {}\n", sample(key)));
    }
    let shown = |config: &str| {
        let root = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        std::fs::write(user.path().join(USER_FILE), config).unwrap();
        std::fs::write(user.path().join("servers.json"), "{}").unwrap();
        let sources = Sources::read(root.path(), Some(user.path())).unwrap();
        let cli = crate::args::parse(
            <crate::args::Cli as clap::CommandFactory>::command()
                .get_matches_from(["cadre", "run", "task"]),
        )
        .unwrap();
        let Some(crate::args::Command::Run(mut cmd)) = cli.command else {
            panic!("not a run");
        };
        resolve_from(&mut cmd.args, sources, true, false).entries
    };
    let (set, default) = (shown(&text), shown(""));
    for key in keys {
        let entry = |entries: &[(String, String, Source)]| {
            entries
                .iter()
                .find(|(k, _, _)| k == key)
                .cloned()
                .unwrap_or_else(|| panic!("`{key}` has no entry"))
        };
        let (_, value, source) = entry(&set);
        assert!(matches!(source, Source::File(..)), "`{key}`: {source:?}");
        assert_ne!(value, entry(&default).1, "`{key}` is read but not applied");
    }
}

#[test]
fn loose_spellings_are_read() {
    let f = read("Max-Parallel = \"4\"\ncompact_at = false\n[limits]\ncontext_tokens = 200_000\n[permissions]\nallow = \"Bash(ls:*)\"\n[extra]\nx = 1\n").unwrap();
    assert_eq!(f.values["limits.max_parallel"], (Value::Number(4), 1));
    assert_eq!(
        f.values["compaction.compact_at"],
        (Value::CompactAt(None), 2)
    );
    assert_eq!(f.values["limits.context_tokens"].0, Value::Number(200_000));
    assert_eq!(
        f.values["permissions.allow"].0,
        Value::List(vec!["Bash(ls:*)".into()])
    );
    assert_eq!(f.unknown.len(), 1, "{:?}", f.unknown);
    assert!(f.unknown[0].starts_with("cadre.toml:7: unknown setting `extra`"));
}

#[test]
fn a_hooks_table_reads_as_claude_codes_hooks_object() {
    let f = read("model = \"sonnet\"\n\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{ type = \"command\", command = \"guard.sh\", timeout = 0 }]\n").unwrap();
    let hooks = f.hooks.all();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].event, cadre_core::HookEvent::PreToolUse);
    assert_eq!(hooks[0].matcher.as_deref(), Some("Bash"));
    assert_eq!(hooks[0].command, "guard.sh");
    assert_eq!(
        hooks[0].timeout_secs,
        cadre_core::internal::DEFAULT_HOOK_TIMEOUT_SECS
    );
    assert_eq!(hooks[0].source, "cadre.toml");
    // Not an unknown setting; its one repair is named with the table's line.
    assert_eq!(f.unknown.len(), 1, "{:?}", f.unknown);
    assert!(
        f.unknown[0].starts_with("cadre.toml:3: a `PreToolUse` hook's timeout 0 ignored"),
        "{:?}",
        f.unknown
    );
    assert_eq!(f.values["model"].0, Value::Text("sonnet".into()));
    // An entry that cannot load refuses the file, at its place.
    let e = read_err("model = \"x\"\n[[hooks.Whenever]]\nhooks = []\n");
    assert!(e.starts_with("cadre.toml:2:"), "{e}");
    assert!(e.contains("unknown hook event `Whenever`"), "{e}");
    let e = read_err("[[hooks.Stop]]\nmatcher = \"(\"\nhooks = []\n");
    assert!(
        e.starts_with("cadre.toml:2:11: a hook entry cannot load: matcher"),
        "{e}"
    );
}

#[test]
fn the_engine_refuses_what_it_cannot_honour_when_given() {
    let flag = Source::Flag;
    let file = Source::File("cadre.toml".into(), 3);
    let env = Source::Env("ANTHROPIC_BASE_URL".into());
    let lines = engine_refusals([
        ("skills_dir", &flag),
        ("bash_timeout", &flag),
        ("model", &flag),
        ("base_url", &file),
        ("provider", &env),
    ]);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with("--skills-dir: "), "{lines:?}");
    assert!(lines[1].starts_with("--bash-timeout: "), "{lines:?}");
    assert!(
        lines[2].starts_with("base_url (cadre.toml:3): "),
        "{lines:?}"
    );
}

#[test]
fn bad_values_name_the_line() {
    let e = read_err("\n[limits]\nmax_turns = -1\n");
    assert!(
        e.starts_with("cadre.toml:3: limits.max_turns must be a whole number from 1 to"),
        "{e}"
    );
    let e = read_err("[permissions]\ndeny = [1]\n");
    assert_eq!(
        e,
        "cadre.toml:2: permissions.deny must be a list of strings; 1 is not one"
    );
    let e = read_err("model = \n");
    assert!(e.starts_with("cadre.toml:1: not valid TOML"), "{e}");
    // Permission modes and rules are checked where the file and line are known.
    let e = read_err("[permissions]\nmode = \"sometimes\"\n");
    assert!(e.starts_with("cadre.toml:2: permissions.mode "), "{e}");
    let e = read_err("[permissions]\nallow = [\"Teleport(x)\"]\n");
    assert!(e.starts_with("cadre.toml:2: permissions.allow "), "{e}");
}

#[test]
fn telemetry_values_are_kept_as_their_variables_hold_them() {
    let f = read("[telemetry]\nheaders = { \"x-api-key\" = \"a,b=c\", tenant = \"t\" }\nresource_attributes = \"team=core,env=dev\"\nmetrics = true\nprotocol = \"http/json\"\n").unwrap();
    assert_eq!(
        f.values["telemetry.headers"].0,
        Value::Text("tenant=t,x-api-key=a%2Cb%3Dc".into())
    );
    assert_eq!(
        f.values["telemetry.resource_attributes"].0,
        Value::Text("team=core,env=dev".into())
    );
    assert_eq!(f.values["telemetry.metrics"].0, Value::Flag(true));
    assert!(f.unknown.is_empty(), "{:?}", f.unknown);
    let e = read_err("[telemetry]\nendpoint = \"collector:4317\"\n");
    assert!(
        e.starts_with("cadre.toml:2: telemetry.endpoint must be an http:// or https:// URL"),
        "{e}"
    );
    let e = read_err("[telemetry]\nprotocol = \"thrift\"\n");
    assert!(
        e.starts_with("cadre.toml:2: telemetry.protocol must be"),
        "{e}"
    );
    let e = read_err("[telemetry]\nlog_user_prompts = \"maybe\"\n");
    assert!(e.contains("must be true or false"), "{e}");
    // A top-level `endpoint` is not taken as the table's.
    let f = read("endpoint = \"http://x\"\n").unwrap();
    assert!(
        f.values.is_empty() && f.unknown.len() == 1,
        "{:?}",
        f.unknown
    );
}

#[test]
fn an_untrusted_project_sets_no_telemetry_endpoint_headers_or_content() {
    let root = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join(PROJECT_FILE),
        "[telemetry]\nendpoint = \"http://project.example:4318\"\nheaders = \"k=v\"\nlog_user_prompts = true\nlog_tool_details = true\nservice_name = \"project\"\nmetrics = true\n",
    )
    .unwrap();
    std::fs::write(
        user.path().join(USER_FILE),
        "[telemetry]\nendpoint = \"http://mine:4318\"\nservice_name = \"mine\"\n",
    )
    .unwrap();
    let files = files(root.path(), Some(user.path())).unwrap();
    let untrusted = super::resolve::telemetry_values_with(&files, false, false);
    assert_eq!(
        untrusted
            .get("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(String::as_str),
        Some("http://mine:4318")
    );
    assert!(!untrusted.contains_key("OTEL_EXPORTER_OTLP_HEADERS"));
    assert!(!untrusted.contains_key("OTEL_LOG_USER_PROMPTS"));
    assert!(!untrusted.contains_key("OTEL_LOG_TOOL_DETAILS"));
    // What the user's file sets is theirs; the project's metrics need its own endpoint.
    assert_eq!(untrusted["OTEL_SERVICE_NAME"], "mine");
    assert!(!untrusted.contains_key("OTEL_METRICS_EXPORTER"));
    let trusted = super::resolve::telemetry_values_with(&files, true, false);
    // The user's endpoint is theirs; the project's content settings count once trusted.
    assert_eq!(trusted["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://mine:4318");
    assert!(!trusted.contains_key("OTEL_EXPORTER_OTLP_HEADERS"));
    assert_eq!(trusted["OTEL_LOG_USER_PROMPTS"], "true");
    // And the project's gated values are items its trust covers.
    let sources = Sources::read(root.path(), Some(user.path())).unwrap();
    let gated: Vec<&str> = sources.project_gated().iter().map(|(k, _, _)| *k).collect();
    for key in [
        "telemetry.endpoint",
        "telemetry.headers",
        "telemetry.log_user_prompts",
        "telemetry.log_tool_details",
    ] {
        assert!(gated.contains(&key), "{key} not in {gated:?}");
    }
}

#[test]
fn a_collector_gets_only_the_headers_written_beside_its_endpoint() {
    let root = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let write = |dir: &std::path::Path, name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap();
    };
    write(
        root.path(),
        PROJECT_FILE,
        "[telemetry]\nendpoint = \"http://project.example:4318\"\n",
    );
    write(
        user.path(),
        USER_FILE,
        "[telemetry]\nheaders = \"x-api-key=secret\"\nprotocol = \"grpc\"\n",
    );
    let files = files(root.path(), Some(user.path())).unwrap();
    let values = super::resolve::telemetry_values_with(&files, true, false);
    assert_eq!(
        values["OTEL_EXPORTER_OTLP_ENDPOINT"],
        "http://project.example:4318"
    );
    // The user's headers and protocol are for the user's collector, not the project's.
    assert!(
        !values.contains_key("OTEL_EXPORTER_OTLP_HEADERS"),
        "{values:?}"
    );
    assert!(
        !values.contains_key("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "{values:?}"
    );
    // Where the environment names a collector or headers, the project's endpoint is not
    // used: the exporter would add the environment's headers to it.
    let values = super::resolve::telemetry_values_with(&files, true, true);
    assert!(
        !values.contains_key("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{values:?}"
    );
    assert_eq!(values["OTEL_EXPORTER_OTLP_HEADERS"], "x-api-key=secret");
}

#[test]
fn a_project_only_fills_the_telemetry_settings_the_user_leaves_unset() {
    let root = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join(PROJECT_FILE),
        "[telemetry]\nendpoint = \"http://project.example:4318\"\nprotocol = \"grpc\"\nmetrics = false\nservice_name = \"project\"\nresource_attributes = \"team=p\"\n",
    )
    .unwrap();
    std::fs::write(
        user.path().join(USER_FILE),
        "[telemetry]\nendpoint = \"http://mine:4318\"\nprotocol = \"http/json\"\nmetrics = true\nservice_name = \"mine\"\n",
    )
    .unwrap();
    let files = files(root.path(), Some(user.path())).unwrap();
    let values = super::resolve::telemetry_values_with(&files, true, false);
    assert_eq!(values["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://mine:4318");
    assert_eq!(values["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/json");
    assert_eq!(values["OTEL_METRICS_EXPORTER"], "otlp");
    assert_eq!(values["OTEL_SERVICE_NAME"], "mine");
    assert_eq!(values["OTEL_RESOURCE_ATTRIBUTES"], "team=p");
    // The project's metrics go only to its own endpoint: with none anywhere, or the user's
    // alone, it asks for nothing.
    std::fs::write(
        root.path().join(PROJECT_FILE),
        "[telemetry]\nmetrics = true\n",
    )
    .unwrap();
    std::fs::write(user.path().join(USER_FILE), "").unwrap();
    let files = super::files(root.path(), Some(user.path())).unwrap();
    let values = super::resolve::telemetry_values_with(&files, true, false);
    assert!(!values.contains_key("OTEL_METRICS_EXPORTER"), "{values:?}");
}
