"""Step retries for outages: a step that failed on an unreachable service runs again, later.

An outage of a few minutes (the object store, the MLflow server or the warehouse restarting,
a network cut) should cost a delay, not a failed day. A `dg.RetryPolicy` on the jobs would
retry every failure, and a failed dbt test, a blocking check or a bad file fails again however
long it waits: it must fail at once, with its own error. So every asset's compute function is
guarded (`retry_outages`, applied where the definitions are built): an error that
`pipelines.lib.outages.outage` calls an outage raises `dg.RetryRequested` with the next wait of
`BACKOFF_S`, logged as a warning that names the service, the error and the wait; any other
error goes through unchanged. Once the waits are spent the step fails with
`OutageOutlastedRetriesError`, the last error as its cause.

Every executor the jobs run on honours the request: the in-process one (the embedded driver,
`materialize`), the multiprocess one and dagster-k8s's step executor. A retried step runs
whole again, as a retried run does: every step is idempotent.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg
from dagster._core.definitions.decorators.op_decorator import DecoratedOpFunction

from pipelines.lib.outages import outage

# The wait before each retry, in seconds: doubling from the seconds a restarted service takes to
# answer again to minutes, for a few minutes in all (far within a run's `dagster/max_runtime`);
# after the last, the step fails.
BACKOFF_S: tuple[float, ...] = (10.0, 20.0, 40.0, 80.0, 160.0)
# Each wait is drawn within this fraction of its value, so that the steps an outage failed
# together do not all come back to the restarted service at the same second.
JITTER = 0.2
# Set on each guarded function, so that a test can see that every asset is guarded.
GUARDED = "flywheel_retries_outages"


class OutageOutlastedRetriesError(RuntimeError):
    """A service stayed unreachable through every retry; the last error is the cause."""


def retry_outages(assets: dg.AssetsDefinition) -> dg.AssetsDefinition:
    """`assets` with its compute function guarded: an outage is retried after the next wait."""
    op = assets.node_def
    if not isinstance(op, dg.OpDefinition) or not isinstance(op.compute_fn, DecoratedOpFunction):
        raise TypeError(f"{assets} is not computed by a decorated op: its retries are not set")
    if is_guarded(assets):
        return assets
    fn = op.compute_fn
    guarded = op.with_replaced_properties(name=op.name)
    # An op's compute function is fixed when it is built, and Dagster offers no way to build a
    # copy with another one: this one is the copy that `with_replaced_properties` just built.
    guarded._compute_fn = fn._replace(decorated_fn=_guard(fn.decorated_fn))
    attributes = assets.get_attributes_dict() | {"node_def": guarded}
    return dg.AssetsDefinition.dagster_internal_init(**attributes)


def is_guarded(assets: dg.AssetsDefinition) -> bool:
    """Whether the compute function of `assets` retries outages."""
    compute = getattr(assets.node_def, "compute_fn", None)
    return getattr(getattr(compute, "decorated_fn", None), GUARDED, False)


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (its signature kept, for Dagster to read its context, inputs and resources)
    raising `dg.RetryRequested` on an outage."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"{fn.__qualname__}: an asynchronous asset's retries are not set")
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def guarded_events(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except Exception as error:
                retry_if_outage(error)
                raise

        setattr(guarded_events, GUARDED, True)
        return guarded_events

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            retry_if_outage(error)
            raise

    setattr(guarded, GUARDED, True)
    return guarded


def retry_if_outage(error: Exception) -> None:
    """Raise `dg.RetryRequested` if `error` is an outage and a wait is left, or
    `OutageOutlastedRetriesError` if none is; return if it is no outage (the caller re-raises)."""
    found = outage(error)
    if found is None:
        return
    try:
        context = dg.OpExecutionContext.get()
    except dg.DagsterInvariantViolationError:
        return  # called outside a run (an asset invoked directly): nothing to retry
    done, waits = context.retry_number, BACKOFF_S
    if done >= len(waits):
        raise OutageOutlastedRetriesError(
            f"{found.service} stayed unreachable through {done} retries over "
            f"{sum(waits[:done]):.0f} s: {found.describe()}"
        ) from error
    wait = waits[done] * random.uniform(1 - JITTER, 1 + JITTER)
    context.log.warning(
        f"{found.service} unreachable ({found.describe()}): retry {done + 1} of {len(waits)} "
        f"in {wait:.3g} s"
    )
    raise dg.RetryRequested(max_retries=len(waits), seconds_to_wait=wait) from error
