"""Lecture 00's questions' steps (it trains nothing, so it makes no claim about training)."""

from __future__ import annotations

from . import Claim, Question, Rerun

CLAIMS: list[Claim] = []

QUESTIONS: dict[int, Question] = {
    2: Question(
        steps=('animals.append("elephant")',
               "keys = torch.cat([keys, torch.tensor([[2.0, 0.3, 0.0]])])",
               "values = torch.cat([values, torch.tensor([[60.0]])])",
               Rerun("result, alpha = soft_lookup(query, keys, values)"),
               Rerun("scales = [0.0, 1.0, 4.0, 20.0]"),
               "cosines = F.cosine_similarity(keys, query[None], dim=1)"),
        changed="alpha.shape[-1]",
        # at scale 20 the elephant (dot product 2, as the horse's and the cow's) takes a third
        # of the weight, while its cosine is the lowest of the three
        check="len(cosines) == len(animals) == 7 and abs(float(w[-1]) - 1 / 3) < 0.01"
              " and float(cosines[-1]) < min(float(cosines[2]), float(cosines[3]))"),
    3: Question(
        steps=("extreme = torch.tensor([-1000.0, -999.0])",
               "naive, stable = naive_softmax(extreme), softmax(extreme)"),
        changed="'naive' in dir()",
        check="bool(torch.isnan(naive).all()) and abs(float(stable.sum()) - 1) < 1e-6"),
}
