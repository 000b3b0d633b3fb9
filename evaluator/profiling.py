"""Where an engine's time goes, for the agents: one short streamed request profiled in its worker after a correct
benchmark. Informational only: the figures come from the engine's own process, so no decision reads them, and a
profile that fails or comes back malformed is left out with a note, the verdict unchanged.
"""
from __future__ import annotations

from reference_runtime.api import StreamSchedule, TTSRequest

from .sandbox import Deadline, Pool, Worker, WorkerFailure
from .verdict import Evidence, Profile

# A short request: under the profiler the eager reference takes about half a second a frame on a GPU.
PROFILE_FRAMES = 8
# The most both profiles may take, within what is left of the benchmark's time: a profiler stuck in a driver
# call must not spend a half-hour benchmark budget on figures no decision reads.
PROFILE_S = 120.0


def read_profile(reply: dict) -> Profile:
    """The worker's profile reply, validated; a malformed one raises ValueError (pydantic's errors are ones)."""
    return Profile.model_validate(reply.get("profile"))


def profile_engine(pool: Pool, worker: Worker, request: TTSRequest, schedule: StreamSchedule,
                   deadline: Deadline) -> Profile | Evidence:
    """The engine's profile of `request`, or a note saying why there is none (never an exception: a failure
    here must not change the verdict)."""
    try:
        return read_profile(pool.use(worker).call("profile", deadline, "profile", request=request,
                                                  schedule=schedule))
    except (WorkerFailure, ValueError) as e:
        return Evidence(check="profile", message=f"no {worker.role} profile (left out, verdict unchanged): "
                                                 f"{str(e)[:300]}")
