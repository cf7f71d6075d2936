"""Image encoders: the layout rule, output shapes for Atari stacks, RGB, grayscale and MinAtar images, uint8
scaled by 1/255 inside, channels-last read as the same image channels-first, parameters counted without building
equal to the built modules', and sizes an encoder cannot read refused in one line."""

from __future__ import annotations

import pytest
import torch

from drl.algorithms.encoders import ImageEncoder, choose, encoder_parameters, image_layout
from drl.errors import UserError

SHAPES = [(4, 84, 84), (84, 84, 3), (84, 84), (10, 10, 6)]
KINDS = ["nature", "impala", "minatar"]


def images(shape, n=2, seed=0) -> torch.Tensor:
    return torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_layout_rule():
    assert image_layout((4, 84, 84)) == (4, 84, 84, False)
    assert image_layout((84, 84, 3)) == (3, 84, 84, True)
    assert image_layout((84, 84)) == (1, 84, 84, False)
    assert image_layout((10, 10, 6)) == (6, 10, 10, True)
    assert image_layout((10, 10, 10)) == (10, 10, 10, True)  # MinAtar Seaquest: a tie reads as HxWxC
    assert image_layout((210, 160, 3)) == (3, 210, 160, True)
    with pytest.raises(ValueError):
        image_layout((4,))


@pytest.mark.parametrize("shape", SHAPES)
def test_output_shapes_and_auto_choice(shape):
    auto = ImageEncoder(shape)
    assert auto.kind == ("minatar" if shape == (10, 10, 6) else "nature")
    for kind in KINDS:
        if kind == "nature" and shape == (10, 10, 6):
            continue
        encoder = ImageEncoder(shape, kind)
        out = encoder(images(shape))
        assert out.shape == (2, encoder.features) == (2, {"nature": 512, "impala": 256, "minatar": 128}[kind])
        assert out.dtype == torch.float32 and (out >= 0).all()  # the fc layer's ReLU


@pytest.mark.parametrize("shape", SHAPES)
def test_uint8_is_scaled_by_1_over_255_inside(shape):
    for kind in ("auto", "impala"):
        encoder = ImageEncoder(shape, kind)
        x = images(shape)
        with torch.no_grad():
            assert torch.equal(encoder(x), encoder(x.float() / 255))
            assert not torch.allclose(encoder(x), encoder(x.float()))  # a float image is taken as it comes


@pytest.mark.parametrize("kind", KINDS)
def test_channels_last_and_planes_read_like_channels_first(kind):
    torch.manual_seed(0)
    last, first = ImageEncoder((84, 84, 3), kind), ImageEncoder((3, 84, 84), kind)
    first.load_state_dict(last.state_dict())
    x = images((84, 84, 3))
    with torch.no_grad():  # the same numbers up to the summation order of another memory format
        torch.testing.assert_close(last(x), first(x.permute(0, 3, 1, 2).contiguous()), rtol=1e-5, atol=1e-6)
    plane, one = ImageEncoder((84, 84), kind), ImageEncoder((1, 84, 84), kind)
    one.load_state_dict(plane.state_dict())
    g = images((84, 84))
    with torch.no_grad():
        assert torch.equal(plane(g), one(g[:, None]))


@pytest.mark.parametrize("shape", SHAPES + [(3, 64, 64), (1, 36, 37), (5, 3, 3)])
@pytest.mark.parametrize("kind", ["auto", *KINDS])
def test_parameters_counted_without_building_equal_the_built_modules(shape, kind):
    if kind == "nature" and min(image_layout(shape)[1:3]) < 36:
        return
    encoder = ImageEncoder(shape, kind)
    count, features = encoder_parameters(kind, shape)
    assert count == sum(p.numel() for p in encoder.parameters())
    assert features == encoder.features


def test_sizes_an_encoder_cannot_read_are_refused_in_one_line():
    with pytest.raises(UserError, match=r"^the nature encoder needs images of at least 36x36, got 10x10; use "):
        encoder_parameters("nature", (10, 10, 4))
    with pytest.raises(UserError, match="at least 36x36, got 35x84"):
        ImageEncoder((4, 35, 84), "nature")
    with pytest.raises(UserError, match="unknown encoder 'resnet'"):
        choose("resnet", (4, 84, 84))
    assert choose("auto", (4, 36, 36)) == "nature" and choose("auto", (4, 35, 84)) == "minatar"


@pytest.mark.parametrize("shape", [(4, 84, 84), (84, 84, 3)])
def test_a_gradient_step_reads_the_batch_channels_last_and_leaves_the_bytes_as_they_were(shape):
    """While training the first convolution gets the scaled pixels in channels-last order (the order changed
    while they are bytes), the same numbers as without gradients, and the learner's uint8 batch is not
    touched."""
    torch.manual_seed(0)
    encoder = ImageEncoder(shape, "nature")
    seen = []
    encoder.convs[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    x = images(shape, n=3)
    before = x.clone()
    trained = encoder(x)
    with torch.no_grad():
        evaluated = encoder(x)
    assert seen[0].is_contiguous(memory_format=torch.channels_last) and seen[0].dtype == torch.float32
    torch.testing.assert_close(seen[0], seen[1], rtol=0, atol=0)
    torch.testing.assert_close(trained.detach(), evaluated, rtol=1e-5, atol=1e-6)
    assert torch.equal(x, before)
