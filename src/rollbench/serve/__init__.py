"""`rollbench serve`: a rollbench policy behind a websocket, batched across clients (docs/remote.md)."""

from rollbench.serve.command import build_server, serve_help, serve_main
from rollbench.serve.server import BackgroundServer, PolicyServer, ServerOptions

__all__ = ["BackgroundServer", "PolicyServer", "ServerOptions", "build_server", "serve_help", "serve_main"]
