"""A tool's start-up without garbage collections."""
import gc
from types import TracebackType
from typing import Optional, Type

__all__ = ['StartUp']


class StartUp:
    """A context manager around a tool's start-up (reading the datasets,
    building the model and the runner) that pauses Python's cyclic garbage
    collector until :meth:`over` is called.

    The start-up imports the model zoos (mmdet's and mmpretrain's models
    import on the first build) and builds what lives until the tool exits:
    about half a million objects, which each full collection walks again
    (about a tenth of a toy Mask R-CNN training's CPU time), and mmengine's
    datasets ask for a collection each. Paused, the start-up runs
    without them, and the datasets' collections walk only what was made
    after the imports so far (frozen on entry). :meth:`over` collects once
    (the start-up's own cyclic garbage), freezes what is left
    (``gc.freeze()``: later collections, here and in the dataloader workers
    forked from here, skip it and leave its pages shared) and resumes the
    collector. Leaving the block before :meth:`over` (an error, a refusal)
    resumes it as well.

    What is frozen is never collected as a cycle: objects of the start-up
    that die later in cycles stay (the tools build one runner per process,
    so this is bounded by the start-up), which is why only the tools' own
    processes use it.
    """

    def __init__(self) -> None:
        self._enabled = gc.isenabled()
        self._paused = False

    def __enter__(self) -> 'StartUp':
        self._enabled = gc.isenabled()
        gc.disable()
        gc.freeze()
        self._paused = True
        return self

    def over(self) -> None:
        """End the pause: one collection, then everything left frozen and
        the collector resumed (as it was on entry)."""
        if not self._paused:
            return
        gc.collect()
        gc.freeze()
        self._resume()

    def _resume(self) -> None:
        self._paused = False
        if self._enabled:
            gc.enable()

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if self._paused:
            self._resume()
