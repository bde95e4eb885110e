//! `cadre-test-mcp`: a real MCP server for cadre's tests (see `cadre_testkit::mcp`).

fn main() -> std::process::ExitCode {
    cadre_testkit::mcp::run_cli(std::env::args().skip(1))
}
