"""Drives the pvgpu dashboard in headless Chromium, as an operator would.

Usage: drive.py URL TOKEN SESSION TENANT [MOVE_SESSION PEER]

Logs in with a wrong token (refused), then the right one; waits for
session SESSION of tenant TENANT to appear and the charts to draw; sets
the tenant's memory quota to 32 MiB and its GPU share to 4 and saves
them; drains GPU 0 with its button; moves session MOVE_SESSION to the
backend's peer PEER with its Move button and waits for its row to go;
ends the session with its button (found before two refreshes
and pressed after them) and waits for its row to go.
Prints one line per step; exits non-zero at the first that fails. The
caller checks the backend's side. With PVGPU_DASHBOARD_SCREENSHOT=FILE, the
page is saved there as a PNG before the session is ended.
"""
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

url, token, session, tenant = sys.argv[1:5]
move, peer = (sys.argv[5:7] + [None, None])[:2]

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000"):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
wait = WebDriverWait(driver, 20)


def step(what):
    print("step:", what, flush=True)


try:
    driver.get(url)
    step("page loaded: " + driver.title)
    box = wait.until(EC.visibility_of_element_located((By.ID, "token")))
    box.send_keys("not-the-token")
    driver.find_element(By.ID, "login").click()
    err = wait.until(EC.visibility_of_element_located((By.ID, "login-error")))
    assert "refused" in err.text, err.text
    step("a wrong token is refused: " + err.text)

    box = driver.find_element(By.ID, "token")
    box.clear()
    box.send_keys(token)
    driver.find_element(By.ID, "login").click()
    row_sel = (By.CSS_SELECTOR, f'#sessions tr[data-session="{session}"]')
    row = wait.until(EC.visibility_of_element_located(row_sel))
    assert tenant in row.text, row.text
    step("session row: " + row.text.replace("\n", " "))

    wait.until(lambda d: int(d.find_element(By.ID, "rtt-chart").get_attribute("data-points") or 0) >= 2)
    step("charts drawn")
    gpus = driver.find_element(By.ID, "gpus").text
    step("GPUs panel: " + gpus.replace("\n", " | "))

    trow = wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, f'#tenants tr[data-tenant="{tenant}"]')))
    mem = trow.find_element(By.CSS_SELECTOR, "input.memory")
    mem.clear()
    mem.send_keys("32")
    share = trow.find_element(By.CSS_SELECTOR, "input.share")
    share.clear()
    share.send_keys("4")
    trow.find_element(By.CSS_SELECTOR, "button.save").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "saved"))
    step("quota saved: " + driver.find_element(By.ID, "status").text)

    driver.find_element(By.CSS_SELECTOR, 'button.drain[data-gpu="0"]').click()
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, '.gpu[data-gpu="0"] .state'), "drained"))
    step("GPU 0 drained: " + driver.find_element(By.CSS_SELECTOR, '.gpu[data-gpu="0"]').text.replace("\n", " | "))
    shot = os.environ.get("PVGPU_DASHBOARD_SCREENSHOT")
    if shot:
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(shot)
        step("screenshot saved to " + shot)

    if move:
        pick = driver.find_element(By.CSS_SELECTOR, f'select.peer[data-session="{move}"]')
        Select(pick).select_by_value(peer)
        driver.find_element(By.CSS_SELECTOR, f'button.migrate[data-session="{move}"]').click()
        wait.until(EC.alert_is_present()).accept()
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "moved to " + peer))
        step("moved: " + driver.find_element(By.ID, "status").text)
        wait.until(EC.invisibility_of_element_located((By.CSS_SELECTOR, f'#sessions tr[data-session="{move}"]')))
        step("the moved session is gone from the table")

    # The page refreshes once a second; a button must survive that, or an
    # operator's click can land on a row that was just replaced.
    end = driver.find_element(By.CSS_SELECTOR, f'button.end[data-session="{session}"]')
    time.sleep(2.5)
    end.click()
    wait.until(EC.alert_is_present()).accept()
    wait.until(EC.invisibility_of_element_located(row_sel))
    step("session ended and gone from the table")
    print("DASHBOARD OK", flush=True)
finally:
    driver.quit()
