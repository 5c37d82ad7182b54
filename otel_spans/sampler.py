"""One sampling decision per trace, made alike by the scheduler and the workers.

``OTEL_TRACES_SAMPLER`` (``otel-spans.traces.sampler``) and ``OTEL_TRACES_SAMPLER_ARG``
name one of the OTel SDK's built-in samplers. A workflow's spans are made in several
processes: the scheduler exports the Dask spans, task groups and task runs, the workers
the spans task code starts. Each process must come to the same decision for the trace,
without talking to the others. So the decision is a pure function of what every
process knows (:meth:`TraceSampler.sampled`): the trace id and, for a workflow that
joins a caller's trace, the caller's W3C ``sampled`` flag. ``traceidratio`` is the
SDK's own rule on the trace id's lower 64 bits, so it is deterministic too.

The workers put the decision in the flags of the task's span context (the parent of
what task code starts) and give their TracerProvider :meth:`TraceSampler.sdk_sampler`:
the same sampler, so that the children of a task's span follow the trace's decision
(parent-based samplers through the flag, the others by deciding again, identically).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

SamplerName = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]
#: The OTel SDK's built-in samplers that otel-spans applies (the specification's
#: ``jaeger_remote`` and ``xray`` need a remote service: warned about and ignored).
SAMPLERS: tuple[SamplerName, ...] = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
#: The SDK's mask of the trace id bits ``traceidratio`` reads (its ``TRACE_ID_LIMIT``).
_TRACE_ID_LIMIT = (1 << 64) - 1


def ratio_bound(ratio: float) -> int:
    """The SDK's ``TraceIdRatioBased.get_bound_for_rate``: ids below it are sampled."""
    return round(ratio * (_TRACE_ID_LIMIT + 1))


@dataclass(frozen=True)
class TraceSampler:
    """A sampler of the OTel specification, as a pure decision per trace."""

    name: SamplerName = "parentbased_always_on"
    #: ``OTEL_TRACES_SAMPLER_ARG``: the share of traces kept by the ratio samplers.
    ratio: float = 1.0

    @property
    def parent_based(self) -> bool:
        return self.name.startswith("parentbased_")

    def sampled(self, trace_id: int, parent_flags: int | None = None) -> bool:
        """Whether the trace ``trace_id`` is exported.

        ``parent_flags``: the W3C flags of the caller whose trace a workflow joins
        (its parent); None for a workflow that starts its own trace (no caller, or a
        caller it only links to: links do not decide, as in the SDK).
        """
        if parent_flags is not None and self.parent_based:
            return bool(parent_flags & 1)
        root = self.name.removeprefix("parentbased_")
        if root == "always_on":
            return True
        if root == "always_off":
            return False
        return (trace_id & _TRACE_ID_LIMIT) < ratio_bound(self.ratio)

    def sdk_sampler(self) -> Sampler:
        """The OTel SDK's sampler that decides as :meth:`sampled` does."""
        from opentelemetry.sdk.trace import sampling

        root_name = self.name.removeprefix("parentbased_")
        root: Sampler
        if root_name == "always_on":
            root = sampling.ALWAYS_ON
        elif root_name == "always_off":
            root = sampling.ALWAYS_OFF
        else:
            root = sampling.TraceIdRatioBased(self.ratio)
        return sampling.ParentBased(root) if self.parent_based else root

    def describe(self) -> str:
        ratio = f" {self.ratio:g}" if self.name.endswith("traceidratio") else ""
        return self.name + ratio
