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


def test_html_comes_back_as_written_whatever_the_parser_makes_of_it():
    # An unclosed <script>'s rest, a CDATA section, declarations, a bogus comment, processing
    # instructions, conditional comments, entities and stray brackets: each kept to the byte.
    pages = ['<p>A dog.</p><script>if (a < b) { x(); }\n// no end',
             '<p>A dog.</p><![CDATA[ a ]] b ]]><p>Two cats.</p>',
             '<!DOCTYPE html><!ENTITY nbsp "&#160;"><?xml version="1.0"?><p>A dog.</p>',
             '<!--[if IE]><p>Old.</p><![endif]--><![if !IE]><p>New.</p><![endif]>',
             '<p>x</p>&nbsp;<p>y &lt; z</p></unopened><p>a</p>',
             '<P CLASS=x>Line one. Line two.</P>\r\n<br>\n\n<a href="?a=1&b=2">Link.</a>']
    for page in pages:
        document = html_document(page, "en")
        assert document.lines, page
        assert document.translated(document.lines) == page
    # A translated run is the translation, escaped: its entities come back as characters but
    # for those HTML needs (&amp; &lt; &gt;).
    document = html_document("<p>A &amp; B&nbsp;&copy; &#60;</p>", "en")
    assert document.lines == ["A & B\xa0© <"]
    assert document.translated(document.lines) == "<p>A &amp; B\xa0© &lt;</p>"


def test_the_text_after_an_unclosed_script_is_no_sentence_and_cdata_is_kept():
    document = html_document("<p>A dog.</p><script>var a = '<p>Not this.</p>';", "en")
    assert document.lines == ["A dog."]
    assert document.translated(["Ein Hund."]) == (
        "<p>Ein Hund.</p><script>var a = '<p>Not this.</p>';")
    document = html_document("<p>A dog.</p><![CDATA[x]]>", "en")
    assert document.translated(["Ein Hund."]) == "<p>Ein Hund.</p><![CDATA[x]]>"
