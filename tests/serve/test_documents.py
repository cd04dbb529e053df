"""Texts and HTML cut into the sentences a model translates, and put back together."""

from vtx.serve.documents import html_document, text_document


def test_a_text_s_sentences_are_cut_and_its_spaces_and_line_breaks_kept():
    text = "  A man is riding a bike.  Two dogs play.\n\nDr. Smith is here!\n"
    document = text_document(text, "en")
    assert document.lines == ["A man is riding a bike.", "Two dogs play.", "Dr. Smith is here!"]
    assert document.translated(document.lines) == text
    assert document.translated(["1", "2", "3"]) == "  1  2\n\n3\n"


def test_html_keeps_its_markup_and_translates_the_text_between_tags():
    page = ('<!DOCTYPE html><p class="a&amp;b">A man &amp; a dog. Two cats.</p><!-- note -->'
            '<script>if (a < b) x();</script><pre>kept  as is</pre><br/>\n<b>Hi</b>')
    document = html_document(page, "en")
    assert document.lines == ["A man & a dog.", "Two cats.", "Hi"]
    assert document.translated(document.lines) == page
    assert document.translated(["Ein Mann & <Hund>.", "Zwei.", "Hallo"]) == (
        '<!DOCTYPE html><p class="a&amp;b">Ein Mann &amp; &lt;Hund&gt;. Zwei.</p><!-- note -->'
        '<script>if (a < b) x();</script><pre>kept  as is</pre><br/>\n<b>Hallo</b>')


def test_html_text_is_read_as_a_browser_shows_it():
    document = html_document("<p>\n  A man\n   is riding.\n</p>", "en")
    assert document.lines == ["A man is riding."]
    assert document.translated(["Ein Mann."]) == "<p>\n  Ein Mann.\n</p>"
