"""``gcompris``: the real photos inside Debian ``gcompris-qt-data``'s Qt resource files
(``/usr/share/gcompris-qt/rcc/*.rcc``, read by ``captioner.rcc``): the explore activities' animals,
monuments (each with a paragraph of English description), the solar system's planets, and the
categorization activity's photos (tools, fishes, monuments, renewable energy, household objects), labelled
from their file names through ``CATEGORIZATION_LABELS``.

Split 40/30/30 into train/val/test by a seeded hash of the label, so one label never crosses splits.
``test`` is held out: nothing is chosen or tuned on it.
"""
from __future__ import annotations

import io
import re
from functools import lru_cache
from pathlib import Path

from captioner.datasets.base import CaptionDataset, Sample, split_by_label
from captioner.errors import BadImageError, CaptionerError

GCOMPRIS_RCC = Path("/usr/share/gcompris-qt/rcc")
PHOTO_FRACTIONS = (0.4, 0.3, 0.3)

PHOTO_FRACTIONS = (0.4, 0.3, 0.3)

# categorization/<folder>/<stem>.webp -> (label, extra subject terms). The stem less its digits, hand-checked
# against the photos; "extra" are words a correct caption may use instead (see captioner.subject).
CATEGORIZATION_LABELS = {
    "cuttingTool": ("cutting tool", ("cutter", "knife")), "hammer": ("hammer", ()),
    "measuringTape": ("measuring tape", ("tape measure", "tape")), "multimeter": ("multimeter", ("meter",)),
    "nailCutter": ("nail clipper", ("nail cutter", "clipper")), "plier": ("pliers", ("plier",)),
    "scissors": ("scissors", ()), "screwDriver": ("screwdriver", ()), "sickle": ("sickle", ()),
    "sideCutter": ("side cutter", ("pliers", "cutter")), "spray": ("spray bottle", ("spray", "bottle")),
    "tweezer": ("tweezers", ("tweezer",)), "wrench": ("wrench", ("spanner",)), "fish": ("fish", ()),
    "dam": ("dam", ()), "geothermal": ("geothermal power station", ("power station", "power plant")),
    "solar": ("solar panel", ("solar cell", "solar")), "windmill": ("wind turbine", ("windmill", "turbine")),
    "baseball": ("baseball", ("ball",)), "blackslate": ("blackboard", ("slate", "chalkboard")),
    "bucket": ("bucket", ("pail",)), "buffetset": ("buffet set", ("dish", "pot", "bowl")),
    "bulb": ("light bulb", ("bulb", "lamp")), "chair": ("chair", ()), "cup": ("cup", ("mug",)),
    "erasers": ("eraser", ("rubber",)), "igloo": ("igloo", ()), "knife": ("knife", ()),
    "pan": ("pan", ("frying pan", "saucepan")), "pencil": ("pencil", ()), "pillow": ("pillow", ("cushion",)),
    "plate": ("plate", ("dish",)), "spoons": ("spoon", ()), "volleyball": ("volleyball", ("ball",)),
    "weighingMachine": ("weighing machine", ("scale", "balance")),
    "IndiaGate": ("India Gate", ("gate", "arch")), "arcDeTriomphe": ("Arc de Triomphe", ("arch",)),
    "bayterek": ("Bayterek tower", ("tower",)), "brandenburgGate": ("Brandenburg Gate", ("gate",)),
    "burj": ("Burj Khalifa skyscraper", ("skyscraper", "tower")), "cathedral": ("cathedral", ("church",)),
    "christTheRedeemer": ("Christ the Redeemer statue", ("statue",)), "colosseum": ("Colosseum", ("amphitheater",)),
    "eiffelTower": ("Eiffel Tower", ()), "empireState": ("Empire State Building skyscraper", ("skyscraper",)),
    "greatPyramid": ("Great Pyramid", ()), "greatWall": ("Great Wall of China", ("wall",)),
    "jucheTower": ("Juche Tower", ("tower",)), "kutubMinar": ("Qutub Minar tower", ("tower", "minaret")),
    "leMusee": ("Louvre museum", ("museum", "pyramid")), "leaningTowerOfPisa": ("Leaning Tower of Pisa", ()),
    "monument": ("monument", ("memorial",)), "mountRushmore": ("Mount Rushmore", ("mountain", "sculpture")),
    "operaHouse": ("Sydney Opera House", ("opera house",)), "parthenon": ("Parthenon", ("temple",)),
    "statueOfLiberty": ("Statue of Liberty", ()), "tajMahal": ("Taj Mahal", ()),
    "usCapitol": ("Capitol building", ("capitol", "dome")), "victoriaMemorial": ("Victoria Memorial", ("palace",)),
    "zimniPalace": ("Winter Palace", ()),
}



class RccImage:
    """A zero-argument renderer of one image inside a Qt resource file (decoded on each call)."""

    def __init__(self, rcc: str, member: str):
        self.rcc, self.member = rcc, member
        self.__name__ = f"{Path(rcc).name}:{member.rsplit('/', 1)[-1]}"

    def __call__(self):
        from PIL import Image

        from captioner.rcc import rcc_files

        data = rcc_files(self.rcc).get(self.member)
        if data is None:
            raise BadImageError(self.__name__, "not found in the resource file")
        try:
            im = Image.open(io.BytesIO(data))
            im.load()
        except Exception as e:  # noqa: BLE001 - any decoder failure is a bad image
            raise BadImageError(self.__name__, f"cannot decode ({e})") from None
        return im


def _with_article(noun: str) -> str:
    """"a hammer", "an owl", "scissors" (plural-only tool names take none)."""
    from captioner.subject import article

    return noun if noun.endswith(("ers", "ors", "ies")) else f"{article(noun)} {noun}"


_QSTR = r'qsTr\("((?:[^"\\]|\\.)*)"\)'


def _explore_entries(files: dict) -> list[tuple[str, str, str]]:
    """(title, description, image member) from the explore activities' board files."""
    out = []
    for k in sorted(files):
        if "/resource/board/board" not in k or not k.endswith(".qml"):
            continue
        text = files[k].decode("utf-8", "replace")
        for block in re.split(r"\n\s*\},?\s*\n", text):
            t = re.search(r'"title"\s*:\s*' + _QSTR, block)
            d = re.search(r'"text"\s*:\s*' + _QSTR, block)
            im = re.search(r'"image2"\s*:\s*"qrc:/([^"]+\.(?:webp|jpg|png))"', block)
            if t and im:
                out.append((t.group(1), d.group(1).replace('\\"', '"') if d else "", im.group(1)))
    return out


@lru_cache(maxsize=2)
def _gcompris_all(root: str) -> tuple:
    from captioner.rcc import rcc_files

    rootp = Path(root)
    if not (rootp / "categorization.rcc").exists():
        raise CaptionerError(f"GCompris data not found at {rootp}; run scripts/setup.sh "
                             "(apt-get install gcompris-qt-data)")
    out = []
    for act in ("explore_world_animals", "explore_farm_animals", "explore_monuments"):
        path = rootp / f"{act}.rcc"
        if not path.exists():
            continue
        files = rcc_files(str(path))
        for title, desc, member in _explore_entries(files):
            if member in files:
                name = title if act == "explore_monuments" else _with_article(title.lower())
                caps = [f"A photo of {name}."] + ([desc] if desc else [])
                out.append(Sample(id=f"{act}/{member.rsplit('/', 1)[-1]}", source=RccImage(str(path), member),
                                  captions=caps, label=title))
    solar = rootp / "solar_system.rcc"
    if solar.exists():
        files = rcc_files(str(solar))
        for k in sorted(files):
            if k.endswith(".webp"):
                body = k.rsplit("/", 1)[-1][:-5]
                label = "the Sun" if body == "sun" else f"planet {body.capitalize()}"
                out.append(Sample(id=f"solar_system/{body}", source=RccImage(str(solar), k),
                                  captions=[f"A photo of {label}."], label=label))
    cat = str(rootp / "categorization.rcc")
    for k in sorted(rcc_files(cat)):
        m = re.search(r"/images/(\w+)/([A-Za-z]+?)(\d*)\.webp$", k)
        if not m or m.group(2) not in CATEGORIZATION_LABELS:
            continue  # the activity's menu pictures (alphabets, numbers)
        label, _ = CATEGORIZATION_LABELS[m.group(2)]
        cap = f"A photo of {label}." if label[0].isupper() else f"A photo of {_with_article(label)}."
        out.append(Sample(id=f"categorization/{m.group(1)}/{m.group(2)}{m.group(3)}",
                          source=RccImage(cat, k), captions=[cap], label=label))
    return tuple(out)


def gcompris(split: str = "val", root=GCOMPRIS_RCC, seed: int = 0) -> CaptionDataset:
    """GCompris' labelled real photos (see the module docstring); split 40/30/30 by label."""
    samples = split_by_label("gcompris", split, list(_gcompris_all(str(root))), seed, PHOTO_FRACTIONS)
    return CaptionDataset("gcompris", split, samples, labels=sorted({s.label for s in samples}), root=str(root))


def subject_extra(label: str) -> tuple:
    """Hand-checked extra subject terms of a GCompris label (``captioner.subject.names_subject``)."""
    return _EXTRA.get(label, ())


_EXTRA = {lab: extra for lab, extra in CATEGORIZATION_LABELS.values()}
