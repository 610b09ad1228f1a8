"""The agent's tools: the registry (:mod:`.registry`) and the recovery tools every session has (:mod:`.recovery`)."""

from agent.tools.recovery import MAX_FETCH_CHARS, RECOVERY_TOOL_NAMES, MessageSource, recovery_tools, searchable
from agent.tools.registry import Tool, ToolHandler, ToolOutput, ToolRegistry

__all__ = [
    "MAX_FETCH_CHARS",
    "RECOVERY_TOOL_NAMES",
    "MessageSource",
    "Tool",
    "ToolHandler",
    "ToolOutput",
    "ToolRegistry",
    "recovery_tools",
    "searchable",
]
