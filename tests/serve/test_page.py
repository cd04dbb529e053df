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

    server = ServerProcess("--checkpoint", trained_checkpoint)
    try:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda driver: "layers" in driver.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "source").send_keys(SENTENCE)
        browser.find_element(By.ID, "run").click()
        translation = wait.until(lambda driver: driver.find_elements(By.CLASS_NAME,
                                                                     "translation"))[0].text
        status, _, reply = request(server.url + "/v1/translate", {
            "text": [SENTENCE], "beam": 4, "nbest": 3, "alignment": True})
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
