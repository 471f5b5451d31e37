# Short name of
# mask-rcnn_apase-aglu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py
# (Mask R-CNN, APA*+AGLU ResNet-50, GOL, LVIS v1, 2x), so that
#   tools/dist_train.sh configs/lvis/apa_mrcnn_r50.py 8
# trains the paper's main LVIS model into work_dirs/apa_mrcnn_r50/.
_base_ = './mask-rcnn_apase-aglu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py'
