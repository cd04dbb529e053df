"""The page of `vtx serve`, driven in a real headless Chromium (Debian's chromium and
chromium-driver, which tests/run.sh installs when running as root)."""

import os
import shutil

import pytest

from vtx.serve.process import ServerProcess, request

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SENTENCE = "A man is riding a bike."


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and DRIVER):
        if os.geteuid() == 0:  # CI: tests/run.sh installs them; a missing browser is a failure
            pytest.fail("chromium or chromedriver missing: apt-get install chromium "
                        "chromium-driver (tests/run.sh does it when run as root)")
        pytest.skip("chromium and chromium-driver are not installed, and only root may "
                    "install them (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1100,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_the_page_shows_a_typed_sentence_s_translation_nbest_and_alignment(
        browser, trained_checkpoint, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # A server asking for api keys: the page, which sends none, gets in by its own origin.
    (tmp_path / "keys.txt").write_text("page-test-key\n")
    server = ServerProcess("--checkpoint", trained_checkpoint, "--api-keys",
                           tmp_path / "keys.txt", "--keyless-origin", "http://127.0.0.1:*")
    try:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda driver: "layers" in driver.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "source").send_keys(SENTENCE)
        browser.find_element(By.ID, "run").click()
        translation = wait.until(lambda driver: driver.find_elements(By.CLASS_NAME,
                                                                     "translation"))[0].text
        status, _, reply = request(server.url + "/v1/translate", {
            "text": [SENTENCE], "beam": 4, "nbest": 3, "alignment": True},
            headers={"Authorization": "Bearer page-test-key"})
        nbest = browser.find_elements(By.CSS_SELECTOR, "table.nbest td.hypothesis")
        aligned = browser.find_elements(By.CSS_SELECTOR, ".heatmap td.aligned")
        # The screenshot of docs/commands.md, when asked for.
        browser.save_screenshot(os.environ.get("VTX_SERVE_SCREENSHOT",
                                               str(tmp_path / "page.png")))
    finally:
        assert server.stop() == 0
    assert status == 200
    hypotheses = reply["translations"][0]["hypotheses"]
    assert translation == hypotheses[0]["text"] and translation
    assert [cell.text for cell in nbest] == [h["text"] for h in hypotheses]
    assert len(aligned) == len(hypotheses[0]["alignment"].split())


@pytest.mark.slow
def test_the_page_draws_a_parser_s_tree_over_the_typed_words(browser, random_parser_checkpoint):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    words = "The company said it expects higher sales ."
    server = ServerProcess("--checkpoint", random_parser_checkpoint, "--max-len-b", "30")
    try:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda driver: driver.find_element(By.ID, "run").text == "Parse")
        browser.find_element(By.ID, "source").send_keys(words)
        browser.find_element(By.ID, "run").click()
        wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, "svg text"))
        leaves = [node.text for node in browser.find_elements(By.CSS_SELECTOR,
                                                               "svg text[fill]")]
        tree = browser.find_element(By.CLASS_NAME, "translation").text
        reply = request(server.url + "/v1/parse", {"text": [words], "beam": 4})[2]
    finally:
        assert server.stop() == 0
    assert leaves == words.split()
    assert tree == reply["trees"][0]["tree"]


@pytest.mark.slow
def test_the_page_chooses_a_pair_and_shows_it_is_working_until_the_answer(
        browser, trained_checkpoint):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    # Each request waits 1.5 s for others to share its batch: long enough to be seen working.
    server = ServerProcess("--model", f"en-de={trained_checkpoint}", "--model",
                           f"de-en={trained_checkpoint}", "--model",
                           f"de-en={trained_checkpoint.parent}", "--batch-wait-ms", 1500)
    try:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120, poll_frequency=0.05)
        wait.until(lambda driver: "layers" in driver.find_element(By.ID, "model").text)
        source, target = (Select(browser.find_element(By.ID, f"{side}-lang"))
                          for side in ("source", "target"))
        assert [o.text for o in source.options] == ["en", "de"]
        assert [o.text for o in target.options] == ["de"]
        source.select_by_value("de")
        assert [o.text for o in target.options] == ["en"]
        assert browser.find_element(By.ID, "model").text.startswith("de-en: ")
        working = browser.find_element(By.ID, "working")
        assert not working.is_displayed()
        browser.find_element(By.ID, "source").send_keys(SENTENCE)
        browser.find_element(By.ID, "run").click()
        wait.until(lambda driver: working.is_displayed()
                   and float(driver.find_element(By.ID, "elapsed").text) > 0.5)
        assert not browser.find_element(By.ID, "run").is_enabled()
        translation = wait.until(lambda driver: driver.find_elements(By.CLASS_NAME,
                                                                     "translation"))[0].text
        assert not working.is_displayed() and browser.find_element(By.ID, "run").is_enabled()
        status, _, reply = request(server.url + "/v1/translate", {
            "text": [SENTENCE], "beam": 4, "nbest": 3, "alignment": True, "model": "de-en"})
        # A refusal clears it too.
        browser.execute_script("document.getElementById('beam').value = 99")
        browser.find_element(By.ID, "run").click()
        error = wait.until(lambda driver: driver.find_element(By.ID, "error").text)
        assert not working.is_displayed()
    finally:
        assert server.stop() == 0
    assert status == 200 and translation == reply["translations"][0]["hypotheses"][0]["text"]
    assert error.startswith("400: field 'beam': 99, over the server's limit")
