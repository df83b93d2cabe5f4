"""Pure scoring functions for batch evaluation; each one can be checked by hand.

Families:

* **Single choice (SeedBench QA-1):** :func:`extract_choice` reads one option letter strictly;
  :func:`qa1_accuracy_strict` scores with it. :func:`qa1_accuracy_lenient` reproduces the reference
  implementation's rule (``gt.lower() in output.lower()``, HuixiangDou2 ``evaluation/analyze/test_read.py``),
  which counts any output containing the letter anywhere ("b" in "because") as correct. It is reported
  only for comparison with the paper's numbers, always labelled *lenient*. :func:`match_option_text` reads
  an answer that repeats one option's text exactly, without its letter.
* **Multiple answer (SeedBench QA-2):** gold answers are letter lists such as ``"A, D, B"`` (unordered; 153
  of the 291 items have a single letter). :func:`extract_choice_set` reads a set of letters;
  :func:`set_f1` is the F1 between predicted and gold letter sets of one question
  (``2|P∩G| / (|P|+|G|)``; an unreadable answer scores 0); :func:`qa2_macro_f1` averages it over questions
  (SeedBench's "Macro-F1"); :func:`qa2_exact_match` counts identical sets. :func:`qa2_label_macro_f1` is
  the other common reading of macro-F1 (binary F1 per option letter over all questions, averaged over
  letters), provided for comparison.
* **Free text (SeedBench QA-3 / QA-4):** :func:`rouge_l` is ROUGE-L F-measure from the maintained
  ``rouge_score`` package with a jieba tokenizer (:func:`tokenize_mixed`). The package's default tokenizer
  lower-cases and keeps only ``[a-z0-9]`` runs, so it **drops CJK characters entirely**: Chinese text becomes
  an empty token list and every Chinese pair scores 0.
* **Extractive / short answers (HotpotQA, generic):** :func:`exact_match` and :func:`token_f1` follow the
  official SQuAD v1.1 evaluation script's normalization (lower-case, remove ASCII punctuation, remove the
  articles a/an/the, collapse whitespace), the max over gold answers, plus HotpotQA's rule that a yes/no
  answer scores F1 0 unless it equals the gold. Extension: CJK characters count as one token each (the
  CMRC 2018 "mixed segmentation" convention), which leaves English scoring unchanged.
* **Retrieval:** :func:`recall_at_k` (fraction of gold passages among the first k distinct retrieved ids)
  and :func:`perfect_retrieval_at_k` (all gold passages in the first k: HippoRAG's "perfect retrieval").
* **KGQA (MetaQA):** :func:`hits_at_1` (the top answer equals a gold answer after normalization) and
  :func:`answer_hit` (a gold answer occurs, word-bounded, in the answer text).
* **Ranked targets (GraphFlow):** over a ranked list of ids and a gold set, :func:`hit_at_k` (a gold id among
  the first k), :func:`reciprocal_rank` (1 / rank of the first gold id, averaged: MRR), and over the raw list of
  a retriever's k results *with their duplicates* (several trajectories ending at one node),
  :func:`results_recall_at_k` (gold results among the first k results, duplicates counted, over
  ``min(|gold|, k)``, capped at 1: the Recall@k of the GraphFlow paper) and :func:`diverse_recall_at_k` (distinct
  gold targets among the distinct results of the first k, over ``min(|gold|, k)``). Diverse recall never exceeds
  recall; they are equal when no gold target is returned twice, so their ratio measures redundancy.

No function here imports Ray; jieba and rouge_score load on first use.
"""

from __future__ import annotations

import functools
import logging
import re
import string
import unicodedata
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

# --------------------------------------------------------------------------------------------------------------
# Choice extraction (QA-1 / QA-2)
# --------------------------------------------------------------------------------------------------------------

_DECOR = r"[\s*_`\"'“”‘’]*"  # markdown bold/italic/code and quotes around a marker or letter
# "A or C", "A is correct": A followed by these words is a letter, not the article "A"
_NOT_ARTICLE_NEXT = (
    r"(?:or|and|nor|vs|versus|is|are|was|were|seems|looks|would|should|could|might|must|can|will|to|because"
    r"|since|as|which|that|only|also|too|then)"
)
_SEP = r"(?:\s*(?:,|、|/|;|&|\band\b|\bor\b|和|与|及|以及|或)\s*|\s*)"  # between letters of one answer


@functools.lru_cache(maxsize=16)
def _patterns(valid: str) -> dict[str, re.Pattern[str]]:
    if not valid or not valid.isascii() or not valid.isalpha() or not valid.isupper():
        raise ValueError(f"valid must be upper-case ASCII letters, got {valid!r}")
    letter = f"[{re.escape(valid)}]"
    run = rf"(?<![A-Za-z0-9_]){letter}(?:{_SEP}{letter})*(?![A-Za-z0-9_])"
    opener = r"[(\[【「<]?"
    cap = f"({run})"  # the one capturing group of each explicit pattern
    close = r"[)\]】」>]?"
    explicit = [
        # 正确答案：C / 答案是C / 最终答案为 A, B / 正确选项：C / 答案应该是(C)
        rf"(?:正确答案|最终答案|正确选项|答案){_DECOR}(?:应该|应当|应)?(?:是|为|选)?{_DECOR}[:=]?{_DECOR}"
        rf"{opener}{cap}",
        # 选C / 选择C / 应选 A和C (not 选项C, which explanations use for every option; not 不选A)
        rf"(?<![不没别])选(?:择)?(?!项){_DECOR}[:]?{_DECOR}{opener}{cap}",
        # 选项C正确 / Option C is correct / choice (B) is the right one (not 选项C对应…)
        rf"(?:选项|(?i:option|choice)){_DECOR}{opener}{cap}{close}{_DECOR}(?:(?i:is|are)\s+)?"
        rf"(?:(?i:the\s+)?(?i:correct|right)|正确|对(?!应))",
        # Answer: C / The correct answer is (C) / Final answer - B / answers are A and C
        rf"(?i:(?:correct|final|right|best)\s+)?(?i:answer|option|choice)s?{_DECOR}"
        rf"(?:(?i:is|are|would\s+be|should\s+be|will\s+be)\b|[:=\-])(?i:\s*option|\s*choice)?"
        rf"{_DECOR}{opener}{cap}",
        # I choose C / I'd select option B / pick (A)
        rf"(?i:choose|select|pick|go\s+with)\s+(?i:option\s+|choice\s+)?{opener}{cap}",
        # C is the correct answer / (B) is the right option
        rf"{opener}{cap}{close}\s+(?i:is\s+the\s+(?:correct|right|best)\s+(?:answer|option|choice))",
    ]
    return {
        "explicit": re.compile("|".join(f"(?:{p})" for p in explicit), re.MULTILINE),
        "letter": re.compile(letter),
        # a letter standing alone: not inside a word, not the English article "A" before a lower-case word
        "standalone": re.compile(
            rf"(?<![A-Za-z0-9_])({letter})(?![A-Za-z0-9_])(?!(?<=A)\s+(?!{_NOT_ARTICLE_NEXT}\b)[a-z])"
        ),
        "bare_run": re.compile(rf"^\W*(?:(?i:answer|答案)\W*)?({run})\W*$"),
        "option_echo": re.compile(rf"^[\s*_>#-]*[(\[]?({letter})\s*[.)\]、:]\s*\S"),
    }


def _nfkc(text: str) -> str:
    # Full-width letters and colons (Ｃ, ：, （）) become ASCII, so one set of patterns reads both scripts.
    return unicodedata.normalize("NFKC", text or "")


def _letters(run: str, valid: str) -> frozenset[str]:
    return frozenset(_patterns(valid)["letter"].findall(run))


def _explicit_sets(text: str, valid: str) -> list[frozenset[str]]:
    out = []
    for m in _patterns(valid)["explicit"].finditer(text):
        run = next(g for g in m.groups() if g is not None)
        out.append(_letters(run, valid))
    return out


def _candidate_set(text: str, valid: str) -> tuple[frozenset[str] | None, str]:
    """Steps 1-4 shared by single and multiple choice: (letters or None, the rule that decided)."""
    pats = _patterns(valid)
    # 1. explicit answer markers; several that disagree make the output ambiguous
    found = _explicit_sets(text, valid)
    if found:
        return (found[0] if all(s == found[0] for s in found) else None), "explicit"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None, "empty"
    # 2. a line that is only an answer ("B", "**A, C**", "Answer - B"): the last line, else the first
    for ln, rule in ((lines[-1], "last_line_bare"), (lines[0], "first_line_bare")):
        m = pats["bare_run"].match(ln)
        if m:
            return _letters(m.group(1), valid), rule
    # 3. trailing lines that echo options ("B. Increase by ..."): their letters
    echoed: set[str] = set()
    for ln in reversed(lines):
        m = pats["option_echo"].match(ln)
        if not m:
            break
        echoed.add(m.group(1))
    if echoed:
        return frozenset(echoed), "last_lines_options"
    # 4. the standalone letters of the last line
    last = frozenset(pats["standalone"].findall(lines[-1]))
    if last:
        return last, "last_line"
    return None, "none"


def extract_choice(output: str, valid: str = "ABCD") -> str | None:
    """The one option letter an output commits to, or None when it commits to none or to several.

    Rules, first that applies (on the NFKC-normalized text, so full-width ``Ｃ``/``：`` read as ASCII):

    1. explicit markers: ``正确答案：C``, ``答案是C``, ``答案为(C)``, ``选C`` (not ``选项C``/``不选C``),
       ``选项C正确``, ``Answer: C``, ``The correct answer is (C)``, ``Option C is correct``, ``I choose C``,
       ``C is the correct answer``. All markers must name the same single letter, else None (ambiguous);
    2. a line that is only an answer (``B``, ``**B**``, ``Answer - B``): the last line, else the first line;
    3. trailing lines that echo options (``B. Increase by ...``);
    4. the standalone letters of the last line;
    5. the last standalone letter in the whole output.

    Rules 2-4 must yield exactly one distinct letter, else None (``A or C``, ``A, B``, all four options echoed).
    A letter is standalone when no ASCII letter, digit or underscore touches it (``Because``, ``C4``, ``OsB2``
    do not count) and it is not the article ``A`` before a lower-case word (``A gene``; but ``A or C``,
    ``A is correct`` keep it). Lower-case letters never count: ``a``/``c`` are words far more often than
    answers. Rule 5 is a last resort and can misread prose (``vitamin C``); the share of outputs decided by
    rules 1-2 is what a well-behaved model should produce.
    """
    text = _nfkc(output)
    letters, rule = _candidate_set(text, valid)
    if letters is not None:
        return next(iter(letters)) if len(letters) == 1 else None
    if rule in ("explicit", "empty"):
        return None
    found = _patterns(valid)["standalone"].findall(text)
    return found[-1] if found else None


def extract_choice_set(output: str, valid: str = "ABCD") -> frozenset[str] | None:
    """The set of option letters an output commits to (multiple-answer questions), or None.

    Same rules 1-4 as :func:`extract_choice` but every letter of the answer is kept (``正确答案：A, C``,
    ``A和C``, ``AC``, ``Answers: A and C``, trailing ``A. …`` / ``C. …`` lines); explicit markers that disagree
    give None. There is no rule 4: scattered letters in an explanation are not an answer set.
    """
    letters, _ = _candidate_set(_nfkc(output), valid)
    return letters if letters else None


def match_option_text(output: str, choices: Sequence[tuple[str, str]]) -> str | None:
    """The letter of the one option whose text *equals* the answer (after :func:`extract_answer_text` and SQuAD
    normalization), for outputs that give the option text without its letter; None otherwise. Equality, not
    containment, keeps it strict."""
    ans = normalize_answer(extract_answer_text(output))
    if not ans:
        return None
    hits = [letter for letter, text in choices if normalize_answer(text) == ans]
    return hits[0] if len(hits) == 1 else None


def parse_choice_set(gold: str, valid: str = "ABCD") -> frozenset[str]:
    """Gold letters of a QA-2 item: ``"A, D, B"`` -> ``{"A", "B", "D"}``; any separator is accepted."""
    return frozenset(ch for ch in _nfkc(gold).upper() if ch in valid)


def choice_correct_strict(output: str, gold: str, valid: str = "ABCD") -> bool:
    return extract_choice(output, valid) == _nfkc(gold).strip().upper()


def choice_correct_lenient(output: str, gold: str) -> bool:
    """LENIENT, for comparison only: the reference rule ``gt.lower() in output.lower()``."""
    return gold.lower() in (output or "").lower()


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def _pairs(outputs: Sequence[str], golds: Sequence[str]) -> list[tuple[str, str]]:
    if len(outputs) != len(golds):
        raise ValueError(f"{len(outputs)} outputs but {len(golds)} gold answers")
    return list(zip(outputs, golds))


def qa1_accuracy_strict(outputs: Sequence[str], golds: Sequence[str], valid: str = "ABCD") -> float:
    """Share of outputs whose strictly extracted letter equals the gold letter (0.0 for no questions)."""
    return _mean(float(choice_correct_strict(o, g, valid)) for o, g in _pairs(outputs, golds))


def qa1_accuracy_lenient(outputs: Sequence[str], golds: Sequence[str]) -> float:
    """LENIENT accuracy as the reference computed it: the gold letter anywhere in the output, any case."""
    return _mean(float(choice_correct_lenient(o, g)) for o, g in _pairs(outputs, golds))


def set_f1(predicted: Iterable[str] | None, gold: Iterable[str]) -> float:
    """F1 between two letter sets: ``2|P∩G| / (|P|+|G|)``; None/empty prediction scores 0 (1 if gold is empty too)."""
    p = frozenset(predicted or ())
    g = frozenset(gold)
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    return 2 * len(p & g) / (len(p) + len(g))


def qa2_macro_f1(outputs: Sequence[str], golds: Sequence[str], valid: str = "ABCD") -> float:
    """Mean over questions of :func:`set_f1` (extracted set vs gold set)."""
    return _mean(set_f1(extract_choice_set(o, valid), parse_choice_set(g, valid)) for o, g in _pairs(outputs, golds))


def qa2_exact_match(outputs: Sequence[str], golds: Sequence[str], valid: str = "ABCD") -> float:
    """Share of questions whose extracted set equals the gold set exactly."""
    return _mean(float(extract_choice_set(o, valid) == parse_choice_set(g, valid)) for o, g in _pairs(outputs, golds))


def qa2_label_macro_f1(
    predicted_sets: Sequence[Iterable[str] | None], gold_sets: Sequence[Iterable[str]], labels: str = "ABCD"
) -> float:
    """Alternative macro-F1: binary F1 of each option letter over all questions, averaged over the letters.

    A letter that is neither predicted nor gold anywhere is left out of the average.
    """
    if len(predicted_sets) != len(gold_sets):
        raise ValueError(f"{len(predicted_sets)} predictions but {len(gold_sets)} gold sets")
    per_label = []
    for lab in labels:
        tp = fp = fn = 0
        for p, g in zip(predicted_sets, gold_sets):
            pin, gin = lab in frozenset(p or ()), lab in frozenset(g)
            tp += pin and gin
            fp += pin and not gin
            fn += gin and not pin
        if tp + fp + fn:
            per_label.append(2 * tp / (2 * tp + fp + fn))
    return _mean(per_label)


# --------------------------------------------------------------------------------------------------------------
# Free-text answers
# --------------------------------------------------------------------------------------------------------------

_ANSWER_MARKER = re.compile(r"(?:正确答案|最终答案|答案|(?i:(?:correct\s+|final\s+)?answer))[*_\s]*[:：][*_\s]*")


def extract_answer_text(output: str) -> str:
    """The text after the last answer marker (``正确答案：`` / ``答案：`` / ``Answer:`` / ``Correct answer:``),
    else the whole output, stripped. SeedBench's instructions ask for ``正确答案：…`` and HippoRAG-style QA
    prompts end in ``Answer:``, so the marker is prompt scaffolding, not part of the answer."""
    text = output or ""
    last = None
    for last in _ANSWER_MARKER.finditer(text):
        pass
    return (text[last.end() :] if last else text).strip()


# one character of a CJK script (kana, ideographs, Hangul); also tells a question's language in datasets
CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*")


@functools.lru_cache(maxsize=1)
def _jieba() -> ModuleType:
    with warnings.catch_warnings():  # jieba 0.42 imports the deprecated pkg_resources
        warnings.simplefilter("ignore", DeprecationWarning)
        import jieba  # noqa: PLC0415 - loads its dictionary (about 1 s), so only when ROUGE is first used

    jieba.setLogLevel(logging.WARNING)
    return jieba


def tokenize_mixed(text: str) -> list[str]:
    """Tokens for ROUGE on Chinese, English or mixed text.

    The text is NFKC-normalized and lower-cased, then segmented by jieba (precise mode). A segment containing
    CJK characters is kept as one token (minus any punctuation); any other segment is split into
    ``[a-z0-9]`` runs like rouge_score's default tokenizer, except that decimals stay whole (``45.1``).
    Punctuation and whitespace produce no token.
    """
    text = _nfkc(text).lower()
    if not text.strip():
        return []
    out: list[str] = []
    for seg in _jieba().lcut(text):
        if CJK_CHAR.search(seg):
            kept = "".join(ch for ch in seg if ch.isalnum())
            if kept:
                out.append(kept)
        else:
            out.extend(_WORD.findall(seg))
    return out


class MixedTokenizer:
    """rouge_score tokenizer interface (``tokenize(text) -> list[str]``) backed by :func:`tokenize_mixed`."""

    def tokenize(self, text: str) -> list[str]:
        return tokenize_mixed(text)


@functools.lru_cache(maxsize=1)
def _rouge_l_scorer() -> Any:  # rouge_score ships no types: a rouge_scorer.RougeScorer
    from rouge_score import rouge_scorer  # noqa: PLC0415

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=MixedTokenizer())


def rouge_l(prediction: str, references: str | Sequence[str]) -> float:
    """ROUGE-L F-measure (LCS over :func:`tokenize_mixed` tokens), the max over references; 0 when either is empty."""
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        return 0.0
    scorer = _rouge_l_scorer()
    return max(scorer.score(ref, prediction or "")["rougeL"].fmeasure for ref in refs)


# --------------------------------------------------------------------------------------------------------------
# SQuAD-style EM / F1
# --------------------------------------------------------------------------------------------------------------

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 ``normalize_answer``: lower, remove punctuation, remove articles, collapse whitespace."""
    s = (s or "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def answer_tokens(s: str) -> list[str]:
    """Whitespace tokens of :func:`normalize_answer`; CJK characters (and CJK punctuation removed) split one each."""
    norm = normalize_answer(s)
    if not CJK_CHAR.search(norm):
        return norm.split()
    out: list[str] = []
    for tok in norm.split():
        buf = ""
        for ch in tok:
            if CJK_CHAR.match(ch):
                if buf:
                    out.append(buf)
                    buf = ""
                out.append(ch)
            elif unicodedata.category(ch).startswith("P"):
                if buf:
                    out.append(buf)
                    buf = ""
            else:
                buf += ch
        if buf:
            out.append(buf)
    return out


def _as_list(golds: str | Iterable[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 when the normalized prediction equals a normalized gold answer (max over golds)."""
    p = answer_tokens(prediction)
    return max((float(p == answer_tokens(g)) for g in _as_list(golds)), default=0.0)


_YES_NO = ("yes", "no", "noanswer")


def _f1_one(prediction: str, gold: str) -> float:
    np_, ng = normalize_answer(prediction), normalize_answer(gold)
    if (np_ in _YES_NO or ng in _YES_NO) and np_ != ng:  # HotpotQA's rule
        return 0.0
    p, g = answer_tokens(prediction), answer_tokens(gold)
    if not p or not g:  # SQuAD v2.0's rule for empty answers; v1.1 would divide by zero
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: str | Iterable[str]) -> float:
    """SQuAD token F1 (bag of normalized tokens), max over gold answers."""
    return max((_f1_one(prediction, g) for g in _as_list(golds)), default=0.0)


# --------------------------------------------------------------------------------------------------------------
# Retrieval
# --------------------------------------------------------------------------------------------------------------


def _top_k(retrieved: Iterable[str], k: int) -> list[str]:
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    seen: dict[str, None] = {}
    for rid in retrieved:
        if rid not in seen:  # a passage reached through several chunks counts once, at its best rank
            seen[rid] = None
            if len(seen) == k:
                break
    return list(seen)


def recall_at_k(retrieved: Sequence[str], gold: Iterable[str], k: int) -> float:
    """|gold ∩ first k distinct retrieved ids| / |gold|; raises ValueError when there is no gold passage."""
    g = set(gold)
    if not g:
        raise ValueError("recall@k needs at least one gold passage")
    return len(g & set(_top_k(retrieved, k))) / len(g)


def perfect_retrieval_at_k(retrieved: Sequence[str], gold: Iterable[str], k: int) -> float:
    """1.0 when every gold passage is among the first k distinct retrieved ids."""
    return float(recall_at_k(retrieved, gold, k) == 1.0)


# --------------------------------------------------------------------------------------------------------------
# KGQA
# --------------------------------------------------------------------------------------------------------------


def split_gold_answers(field: str, sep: str = "|") -> tuple[str, ...]:
    """MetaQA's answer column ``"Comedy|Musical"`` -> ``("Comedy", "Musical")`` (blank parts dropped)."""
    return tuple(p.strip() for p in (field or "").split(sep) if p.strip())


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def top_answer(answer_text: str) -> str:
    """The first answer of a free-text reply: after any ``Answer:`` marker, the first non-empty line, the part
    before the first ``|`` or ``;`` (MetaQA style lists), without a leading bullet."""
    body = extract_answer_text(answer_text)
    for line in body.splitlines():
        line = _BULLET.sub("", line).strip()
        if line:
            return re.split(r"[|;]", line, maxsplit=1)[0].strip()
    return ""


def hits_at_1(predicted: str | Sequence[str], golds: Iterable[str]) -> float:
    """1.0 when the top prediction (the string, or the first of a ranked list) equals a gold answer after
    :func:`normalize_answer`."""
    top = predicted if isinstance(predicted, str) else (predicted[0] if predicted else "")
    nt = normalize_answer(top)
    return float(bool(nt) and any(nt == normalize_answer(g) for g in golds))


def _normalize_spaced(s: str) -> str:
    # like normalize_answer, but punctuation becomes a space, so "Musical|Comedy" keeps two words
    s = "".join(" " if ch in _PUNCT else ch for ch in (s or "").lower())
    return " ".join(_ARTICLES.sub(" ", s).split())


def answer_hit(answer_text: str, golds: Iterable[str]) -> float:
    """1.0 when some gold answer occurs word-bounded in the answer text, both normalized like SQuAD except that
    punctuation separates words (the "Hit" used for free-text KGQA answers)."""
    text = f" {_normalize_spaced(answer_text)} "
    return float(any((ng := _normalize_spaced(g)) and f" {ng} " in text for g in golds))


# --------------------------------------------------------------------------------------------------------------
# Ranked targets (GraphFlow)
# --------------------------------------------------------------------------------------------------------------


def _gold_set(gold: Iterable[object]) -> set[object]:
    g = set(gold)
    if not g:
        raise ValueError("a ranking metric needs at least one gold target")
    return g


def hit_at_k(ranked: Sequence[object], gold: Iterable[object], k: int) -> float:
    """1.0 when one of the first ``k`` ranked ids is gold."""
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    g = _gold_set(gold)
    return float(any(r in g for r in ranked[:k]))


def reciprocal_rank(ranked: Sequence[object], gold: Iterable[object]) -> float:
    """1 / (1-based rank of the first gold id); 0.0 when none is ranked. Its mean over questions is the MRR."""
    g = _gold_set(gold)
    for i, r in enumerate(ranked, 1):
        if r in g:
            return 1.0 / i
    return 0.0


def results_recall_at_k(results: Sequence[object], gold: Iterable[object], k: int) -> float:
    """Gold results among the first ``k`` results, a duplicate counted each time, over ``min(|gold|, k)``,
    capped at 1 (the paper's Recall@k: a retriever returning one gold target k times scores 1)."""
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    g = _gold_set(gold)
    return min(1.0, sum(1 for r in results[:k] if r in g) / min(len(g), k))


def diverse_recall_at_k(results: Sequence[object], gold: Iterable[object], k: int) -> float:
    """Distinct gold targets among the first ``k`` results, over ``min(|gold|, k)`` (duplicates count once)."""
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    g = _gold_set(gold)
    return len(g & set(results[:k])) / min(len(g), k)
