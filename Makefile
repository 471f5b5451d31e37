# The two commands of the README. Both create or reuse .venv/ first.
PYTHON := .venv/bin/python
TOY_CONFIGS := configs/toy/mask-rcnn_r50_fpn_toy-coco.py configs/toy/mask-rcnn_r50_fpn_toy-lvis.py

.PHONY: env demo test data

env:
	bash tools/setup_env.sh

data: env
	$(PYTHON) tools/misc/generate_toy_data.py --out-dir data/

# Main job: generate the toy COCO and LVIS sets, train Mask R-CNN on each and
# evaluate it (bbox + segm tables), then re-test the COCO checkpoint.
demo: data
	$(PYTHON) tools/train.py configs/toy/mask-rcnn_r50_fpn_toy-coco.py --work-dir work_dirs/toy-coco
	$(PYTHON) tools/train.py configs/toy/mask-rcnn_r50_fpn_toy-lvis.py --work-dir work_dirs/toy-lvis
	$(PYTHON) tools/test.py configs/toy/mask-rcnn_r50_fpn_toy-coco.py work_dirs/toy-coco/epoch_8.pth --work-dir work_dirs/toy-coco

test: env
	$(PYTHON) -m pytest tests
