"""`kvcalc mcp`: the library functions (kvcalc/cli/tools.py) as a Model Context Protocol
server over stdio, on the official SDK's low-level Server (the `mcp` extra). Tools list
with the schemas made from the functions' signatures; a call answers the command's
`--format json` as text and as structured content; a KvcalcError is a tool error in
kvcalc's words (isError), never a traceback.

The SDK is imported only when the command runs: `import kvcalc` and every other command
start without it (README "Start-up").
"""

from __future__ import annotations

import json
import sys

import typer

from kvcalc import __version__
from kvcalc.cli.parsing import command
from kvcalc.errors import KvcalcError

INSTALL = "pip install 'kvcalc[mcp]'"


def _sdk():
    """The SDK's modules, or one line saying how to install them."""
    try:
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
        import anyio
        import mcp_types
    except ImportError:
        raise KvcalcError("kvcalc mcp needs the MCP SDK, which is not installed: "
                          + INSTALL) from None
    return anyio, mcp_types, Server, stdio_server


def server():
    """The low-level Server carrying kvcalc's tools."""
    _, types, Server, _ = _sdk()
    from kvcalc.cli.tools import tools

    known = tools()
    listed = [types.Tool(name=t.name, description=t.description(), input_schema=t.input_schema(),
                         output_schema=t.output_schema())
              for t in known.values()]

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx, params):
        tool = known.get(params.name)
        try:
            if tool is None:
                raise KvcalcError(f"no tool {params.name!r}; kvcalc's tools: {', '.join(known)}")
            data = tool.call(params.arguments)
        except KvcalcError as e:  # ParameterError names the tool's own argument
            return _error(types, " ".join(str(e).split()))
        except Exception as e:  # a kvcalc bug: said in a line, and the server lives on
            return _error(types, f"internal error ({type(e).__name__}: {e}); please report it")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(data, indent=2))],
            structured_content=data)

    return Server("kvcalc", version=__version__,
                  instructions="LLM inference memory and speed per serving engine: `estimate` "
                  "sizes a model's KV cache, weights and decode speed; `fit` says whether it "
                  "fits on a GPU as vLLM, SGLang or TensorRT-LLM count their start-up; `plan` "
                  "finds the layouts and launch line for N GPUs; `bench` predicts what "
                  "`vllm bench serve` measures under load; `check` sets a start-up log beside "
                  "kvcalc's count; `sweep` tabulates a grid.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _error(types, message: str):
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                is_error=True)


def serve() -> None:
    """Serve over stdin and stdout until the client closes them."""
    anyio, _, _, stdio_server = _sdk()
    app = server()

    async def run():
        async with stdio_server() as (read_stream, write_stream):
            await app.run(read_stream, write_stream, app.create_initialization_options())

    anyio.run(run)


def register(app: typer.Typer, only: str | None = None) -> None:
    @command(app, only, name="mcp")
    def mcp_command() -> None:
        """Serve kvcalc's estimate, fit, plan, bench, check and sweep as Model Context
        Protocol tools over stdio
        (for an agent: README "MCP"); needs `pip install 'kvcalc[mcp]'`."""
        try:
            serve()
        except KeyboardInterrupt:  # the client (or a person) stopped it
            sys.exit(0)
