//! The test MCP server over stdio, started by toolgate as a child process in the tests.

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tests::mcp_server::serve_stdio().await
}
