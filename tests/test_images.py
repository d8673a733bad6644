import numpy as np
import pytest
from PIL import Image

from captioner.errors import BadImageError
from captioner.images import load_image


def _save(tmp_path, name, im, **kw):
    p = tmp_path / name
    im.save(p, **kw)
    return p


def test_rgba_is_composited_on_white(tmp_path):
    a = np.zeros((4, 4, 4), np.uint8)
    a[..., 0] = 255  # red
    a[:2, :, 3] = 255  # top half opaque, bottom half transparent
    im = load_image(_save(tmp_path, "x.png", Image.fromarray(a, "RGBA")))
    assert im.mode == "RGB"
    assert im.getpixel((0, 0)) == (255, 0, 0)
    assert im.getpixel((0, 3)) == (255, 255, 255)


def test_grayscale_cmyk_palette_16bit(tmp_path):
    assert load_image(_save(tmp_path, "g.png", Image.new("L", (3, 3), 128))).getpixel((1, 1)) == (128, 128, 128)
    cmyk = load_image(_save(tmp_path, "c.jpg", Image.new("CMYK", (8, 8), (0, 0, 0, 0))))
    assert cmyk.mode == "RGB" and min(cmyk.getpixel((4, 4))) > 240
    p = Image.new("P", (2, 2), 0)
    p.putpalette([0, 255, 0] * 256)
    assert load_image(_save(tmp_path, "p.png", p)).getpixel((0, 0)) == (0, 255, 0)
    a16 = np.array([[0, 65535], [32768, 0]], np.uint16)
    im16 = load_image(_save(tmp_path, "i16.png", Image.fromarray(a16)))
    assert im16.getpixel((1, 0)) == (255, 255, 255) and im16.getpixel((0, 0)) == (0, 0, 0)


def test_animated_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (4, 4), c) for c in ((255, 0, 0), (0, 0, 255))]
    p = tmp_path / "a.gif"
    frames[0].save(p, save_all=True, append_images=frames[1:])
    r, g, b = load_image(p).getpixel((1, 1))
    assert r > 200 and b < 50


def test_missing_truncated_and_not_an_image(tmp_path):
    with pytest.raises(BadImageError, match="file not found"):
        load_image(tmp_path / "nope.png")
    p = _save(tmp_path, "t.png", Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)))
    p.write_bytes(p.read_bytes()[:300])
    with pytest.raises(BadImageError, match="truncated"):
        load_image(p)
    txt = tmp_path / "x.jpg"
    txt.write_text("hello")
    with pytest.raises(BadImageError, match="not an image"):
        load_image(txt)


def test_huge_image_is_downscaled(tmp_path):
    p = _save(tmp_path, "big.png", Image.new("RGB", (10000, 10000), (10, 20, 30)))
    im = load_image(p)
    assert max(im.size) == 4096 and im.getpixel((5, 5)) == (10, 20, 30)
