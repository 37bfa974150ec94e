"""The Content-Security-Policy in Chromium (docs/design.md §12): every page the browser
tests open keeps to it (the `page` and `phone` fixtures fail a test whose pages the
browser refused anything on), the pages only staff open here, and a script written into
a page is refused."""

from playwright.sync_api import Browser, Page, expect

from tests.e2e.studio import DESKTOP, Studio, policy_refusals, sign_in


def test_the_admin_and_the_api_docs_keep_to_the_policy(page: Page):
    sign_in(page)
    for path in [
        "/admin/",
        "/admin/studio/batch/",
        "/admin/studio/task/",
        "/admin/axes/accessattempt/",
    ]:
        answer = page.goto(path)
        assert answer is not None and answer.status == 200, path
        assert "script-src 'self'" in answer.headers["content-security-policy"], path
        expect(page.locator("h1").first).to_be_visible()
    page.goto("/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Avatars")
    # The fixture fails the test at its end if anything on these pages was refused.


def test_a_script_written_into_a_page_is_refused(browser: Browser, studio: Studio):
    context = browser.new_context(base_url=studio.url, viewport=DESKTOP)
    refused = policy_refusals(context)
    try:
        page = context.new_page()
        sign_in(page)
        page.evaluate(
            """() => {
                const script = document.createElement("script");
                script.textContent = "window.ranInline = true";
                document.body.append(script);
                const style = document.createElement("style");
                style.textContent = "body { display: none }";
                document.head.append(style);
            }"""
        )

        assert page.evaluate("() => window.ranInline === undefined"), "an inline script ran"
        expect(page.get_by_role("heading", name="Batches")).to_be_visible()
        assert any("inline script" in line for line in refused), refused
        assert any("inline style" in line for line in refused), refused
    finally:
        context.close()
