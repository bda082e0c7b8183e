"""Where a ``ComposableMemory`` meets LlamaIndex's agents: whose memory a tool acts on (the
run's ``memory=``, in its workflow ``Context``: :class:`RunMemoryTool`), and whether the
agent asking drops a leading system message (a ``ReActAgent`` without a
``system_prompt``: :func:`drops_leading_system_message`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

from llama_index.core.async_utils import asyncio_run
from llama_index.core.tools import (
    AsyncBaseTool,
    BaseTool,
    FunctionTool,
    ToolOutput,
    adapt_to_async_tool,
)
from llama_index.core.workflow import Context

from ..core.asyncbridge import LoopLocks, run_io
from ..core.errors import ScopeError
from ..core.types import Scope
from .tool_arguments import check_arguments

if TYPE_CHECKING:
    from .runtime import Facade

#: The key under which LlamaIndex's agents keep the run's memory in ``Context.store``.
RUN_MEMORY_KEY = "memory"
#: The name under which agents pass their ``Context`` to a :class:`RunMemoryTool`.
CTX_PARAM = "ctx"


@runtime_checkable
class ToolHolder(Protocol):
    """What offers the tools of ``memory.tools()``: a source with tools
    (:class:`~llama_memory.sources.base.WithTools`), or the memory's instructions."""

    name: str

    def tools(self, scope: Scope) -> list[Any]:
        """The holder's agent tools, acting for ``scope``."""


class RunMemoryTool(FunctionTool):
    """A tool of ``memory.tools()`` that acts for the memory of the agent run calling it.

    Inside a run of ``FunctionAgent``, ``ReActAgent`` or ``AgentWorkflow`` the tool reads
    the run's memory from the workflow ``Context`` and calls the same tool of the same
    source of *that* memory: one agent built with ``alice.tools()`` and run with
    ``memory=bob`` writes into Bob's memory. Called directly, or from a workflow that
    keeps no memory, it acts for the memory it came from. When the run's memory lacks
    the source it raises :class:`~llama_memory.core.errors.ScopeError` (shown to the LLM
    as the tool's result). The LLM sees the source tool's schema unchanged, and named
    arguments that do not fit it raise
    :class:`~llama_memory.core.errors.ToolArgumentError` before the tool runs, saying
    what was wrong and which arguments (names and types) the tool takes.
    """

    def __init__(
        self, origin: Facade, source: ToolHolder, tool: BaseTool, host: Optional[type[Any]] = None,
    ) -> None:  # fmt: skip
        """Wrap ``tool``, one of ``source.tools(origin.scope)``; ``host`` is the memory
        class a run's memory must be an instance of (default ``origin``'s class)."""
        self._origin = origin
        self._host: type[Any] = host or type(origin)
        self._source = source
        self._tool = tool
        super().__init__(fn=self._run, async_fn=self._arun, metadata=tool.metadata)
        # Agents pass their Context to a FunctionTool that says it takes one. Said here,
        # not by an annotation: FunctionTool reads annotations unevaluated, and this
        # module's are postponed strings.
        self.requires_context = True
        self.ctx_param_name = CTX_PARAM

    @property
    def origin(self) -> Facade:
        """The memory this tool came from (the one it acts for outside a run)."""
        return self._origin

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Call the tool for the run's memory (``ctx=``) or, without one, for :attr:`origin`."""
        ctx = kwargs.pop(CTX_PARAM, None)
        memory = self._origin if ctx is None else asyncio_run(_run_memory(ctx, self._origin))
        return self._call_for(memory, args, kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Async :meth:`call`, run as the memory's own async calls are."""
        ctx = kwargs.pop(CTX_PARAM, None)
        memory = self._origin if ctx is None else await _run_memory(ctx, self._origin)
        if isinstance(memory, self._host):
            return await memory.runtime.run(self._call_for, memory, args, kwargs)
        # A run's memory that is not one of ours: _call_for says what is wrong.
        return await run_io(LoopLocks(), None, self._call_for, memory, args, kwargs)

    def _run(self, ctx: Optional[Context] = None, **kwargs: Any) -> Any:
        return self.call(ctx=ctx, **kwargs).raw_output

    async def _arun(self, ctx: Optional[Context] = None, **kwargs: Any) -> Any:
        return (await self.acall(ctx=ctx, **kwargs)).raw_output

    def _call_for(self, memory: Any, args: tuple, kwargs: dict[str, Any]) -> ToolOutput:
        if not args:  # an LLM's call: named arguments, checked so that a wrong one is said plainly
            metadata = self.metadata
            check_arguments(metadata.get_name(), metadata.fn_schema, metadata.get_parameters_dict(), kwargs)
        tool = self._tool_of(memory)
        # Serialised with the memory's own calls, as memory.add_triples() and the like are.
        with memory.runtime.lock:
            return tool.call(*args, **kwargs)

    def _tool_of(self, memory: Any) -> AsyncBaseTool:
        """The same tool of the same source of ``memory``, bound to its user."""
        if memory is self._origin:
            return adapt_to_async_tool(self._tool)
        name = self.metadata.get_name()
        if not isinstance(memory, self._host):
            raise ScopeError(
                f"the {name!r} tool acts for the memory of the agent run calling it, and this "
                f"run's memory is a {type(memory).__name__}, not a ComposableMemory, so it has "
                f"no user to act for. Run the agent with memory=ComposableMemory.from_defaults("
                f"user_id=..., ...) (a memory with a {self._source.name!r} source)."
            )
        # The sources, and what else offers tools (the user's instructions).
        holders = memory.runtime.tool_holders()
        source: Optional[ToolHolder] = next(
            (s for s in holders if type(s) is type(self._source) and s.name == self._source.name), None,
        )  # fmt: skip
        if source is None:
            raise ScopeError(
                f"the {name!r} tool acts for the memory of the agent run calling it, and this "
                f"run's memory (user {memory.user_id!r}) has no {self._source.name!r} source "
                f"(it has {[s.name for s in holders]}). Run the agent with a memory "
                f"that has one, or build the agent's tools from a memory like the run's."
            )
        for tool in source.tools(memory.scope):
            if tool.metadata.get_name() == name:
                return adapt_to_async_tool(tool)
        raise ScopeError(
            f"the run's memory (user {memory.user_id!r}) has a {source.name!r} source but "
            f"it offers no {name!r} tool"
        )


async def _run_memory(ctx: Context, default: Facade) -> Any:
    """The memory of the run ``ctx`` belongs to (a LlamaIndex ``Memory`` holding
    llama-memory blocks counts as the blocks' memory); ``default`` when it keeps none."""
    memory = await ctx.store.get(RUN_MEMORY_KEY, default=None)
    if memory is None:
        return default
    # A block that reaches a memory of ours says so (llama_memory.blocks): asked, not
    # imported, since the blocks build on the memory, which builds on this module.
    for block in getattr(memory, "memory_blocks", None) or ():
        run_memory = getattr(block, "run_memory", None)
        if callable(run_memory):
            return run_memory(memory)
    return memory


async def drops_leading_system_message() -> bool:
    """Whether the step running now is a ``ReActAgent``'s without a ``system_prompt``
    (which drops a leading system message); False outside a workflow step."""
    from llama_index.core.agent.workflow import AgentWorkflow, ReActAgent

    try:
        ctx = Context.get_step_context()
    except Exception:  # not inside a workflow step: an app calling the memory itself
        return False
    # LlamaIndex has no public way to ask a step's Context for its workflow; when its
    # internals change this says False, and the tests of the ReActAgent case fail.
    agent = getattr(getattr(ctx, "_face", None), "_workflow", None)
    if isinstance(agent, AgentWorkflow):
        current = await ctx.store.get("current_agent_name", default=None)
        agent = agent.agents.get(current) if current is not None else None
    return isinstance(agent, ReActAgent) and not agent.system_prompt
