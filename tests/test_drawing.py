"""The placeholder portraits: drawn for Ember's stand-in and for the demo's reference photos."""

import io
import json
from pathlib import Path

from PIL import Image, ImageChops, ImageDraw

from studio import drawing
from studio.drawing import Picture, render_clip, render_png
from tests.processes import run_snippet

ROOT = Path(__file__).resolve().parent.parent


def portrait(seed: str, stamp: str = "job_1") -> Picture:
    return Picture(seed=seed, provider="flux", frame="image", candidate="#1", stamp=stamp)


def test_it_draws_a_png_portrait_of_the_asked_size():
    image = Image.open(io.BytesIO(render_png(portrait("ada"), size=384)))

    assert (image.format, image.size) == ("PNG", (384, 384))


def test_it_draws_different_people_for_different_seeds_and_stamps():
    ada, bo = render_png(portrait("ada")), render_png(portrait("bo"))
    ada_again = render_png(portrait("ada", stamp="job_2"))

    assert len({ada, bo, ada_again}) == 3


def test_kept_labels_give_the_pixels_that_drawing_the_outlined_text_gives():
    picture = Picture(
        seed="ada", provider="openai-image-1", frame="image", candidate="#3", stamp="j"
    )
    size, pad = 512, 512 // 32
    expected = Image.new("RGB", (size, size), drawing._palette(picture.seed)[0])
    draw = ImageDraw.Draw(expected)
    drawing._draw_figure(draw, size, drawing._palette(picture.seed), 0)
    outlined = {"fill": (255, 255, 255), "stroke_fill": (0, 0, 0)}
    for at, text, font_size, stroke, anchor in [
        ((pad, pad), picture.provider, size // 14, 2, "la"),
        ((pad, pad + size // 11), picture.frame, size // 20, 2, "la"),
        ((size - pad, pad), picture.candidate, size // 7, 3, "ra"),
        ((pad, size - pad), picture.stamp, size // 36, 1, "ls"),
    ]:
        font = drawing._font(font_size)
        draw.text(at, text, font=font, anchor=anchor, stroke_width=stroke, **outlined)

    drawn = drawing._portrait(picture, size)

    assert ImageChops.difference(drawn, expected).getbbox() is None


def test_each_label_is_drawn_once_however_many_pictures_carry_it():
    drawing._label.cache_clear()
    for number in range(12):
        render_png(portrait(f"seed-{number}", stamp=f"job_{number}"))

    # provider, frame and candidate: three labels, whatever the seeds and stamps.
    assert drawing._label.cache_info().misses == 3, drawing._label.cache_info()


def test_it_draws_a_clip_as_an_animated_webp():
    clip = Image.open(io.BytesIO(render_clip(portrait("ada"))))

    assert clip.format == "WEBP" and clip.n_frames > 1


def test_it_seeds_the_demo_without_loading_the_ember_simulator(tmp_path):
    """The demo draws its reference photos itself; Ember's stand-in is another process."""
    probe = (
        "import json, sys, django\n"
        "django.setup()\n"
        "import studio.demo\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('studio.ember'))))\n"
    )
    done = run_snippet(probe, data_dir=tmp_path)

    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.startswith("studio.ember.simulator")], loaded
