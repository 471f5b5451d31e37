"""Weights as safetensors: written, recognised by their header whatever
the name, read by safe_load and mmengine's loaders, refused for a resume."""
import io

import pytest
import torch
from mmengine.runner import CheckpointLoader

from mmact.checkpoint import (is_safetensors, load_safetensors,
                              safe_checkpoint_loading, safe_load,
                              save_safetensors)
from mmact.utils.preflight import check_checkpoint


@pytest.fixture
def weights():
    base = torch.randn(4, 3)
    return {
        'conv.weight': base,
        'view': base[1:],  # shares memory with conv.weight
        'bn.num_batches_tracked': torch.tensor(7),
        'half': torch.ones(2, dtype=torch.float16),
    }


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def test_round_trip_with_metadata(tmp_path, weights):
    import safetensors
    path = tmp_path / 'w.safetensors'
    save_safetensors(weights, path, metadata={'epoch': 3, 'layout': 'x'})
    assert _equal(load_safetensors(path), weights)
    with safetensors.safe_open(str(path), 'pt') as file:
        assert file.metadata() == {'epoch': '3', 'layout': '"x"'}


def test_recognised_by_header_not_name(tmp_path, weights):
    path = tmp_path / 'weights.pth'  # a safetensors file under a .pth name
    save_safetensors(weights, path)
    assert is_safetensors(path) and is_safetensors(
        io.BytesIO(path.read_bytes()))
    assert _equal(safe_load(path), weights)
    assert _equal(safe_load(io.BytesIO(path.read_bytes())), weights)
    torch.save(weights, tmp_path / 'torch.pth')
    (tmp_path / 'empty').write_bytes(b'')
    assert not is_safetensors(tmp_path / 'torch.pth')
    assert not is_safetensors(tmp_path / 'empty')
    assert not is_safetensors(tmp_path / 'absent')


def test_read_by_mmengine_loaders(tmp_path, weights):
    path = tmp_path / 'w.safetensors'
    save_safetensors(weights, path)
    with safe_checkpoint_loading():
        assert _equal(CheckpointLoader.load_checkpoint(str(path)), weights)


def test_bad_input_is_named(tmp_path, weights):
    with pytest.raises(TypeError, match=r"not tensors: \['epoch'\]"):
        save_safetensors(dict(weights, epoch=3), tmp_path / 'x.safetensors')
    path = tmp_path / 'w.safetensors'
    save_safetensors(weights, path)
    with pytest.raises(ValueError, match='map_location of a .safetensors'):
        safe_load(path, map_location={'cuda:0': 'cpu'})


def test_a_resume_needs_the_full_checkpoint(tmp_path, weights):
    path = tmp_path / 'w.safetensors'
    save_safetensors(weights, path)
    check_checkpoint(str(path))  # weights: fine for load_from
    with pytest.raises(ValueError, match='holds weights only'):
        check_checkpoint(str(path), resume=True)


def test_metadata_is_read_back_from_the_header(tmp_path, weights):
    """save_safetensors stores JSON; other writers' plain strings stay
    strings; a file of another format is refused by name."""
    import safetensors.torch

    from mmact.checkpoint import load_safetensors_metadata
    path = tmp_path / 'w.safetensors'
    meta = dict(dataset_meta=dict(classes=['a', 'b'], palette=[[1, 2, 3]]))
    save_safetensors(weights, path, metadata=meta)
    assert load_safetensors_metadata(path) == meta
    safetensors.torch.save_file({'x': torch.zeros(1)},
                                str(path),
                                metadata={'format': 'pt'})
    assert load_safetensors_metadata(path) == {'format': 'pt'}
    torch.save({'x': torch.zeros(1)}, tmp_path / 'w.pth')
    with pytest.raises(ValueError, match='w.pth is not a safetensors file'):
        load_safetensors_metadata(tmp_path / 'w.pth')
