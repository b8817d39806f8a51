//! A real headless browser for the console's tests: Debian's `chromium`, driven over the
//! WebDriver protocol (JSON over HTTP) by Debian's `chromedriver`.
//!
//! The test starts both processes itself and stops both by PID: chromium with a fresh
//! profile directory and a DevTools port it picks (read back from `DevToolsActivePort`),
//! chromedriver attached to it (`debuggerAddress`), so no browser is ever left behind by a
//! driver that died. The flags keep chromium off the network this machine does not have.
//! Every wait polls a condition in the page under a deadline, and a failing wait saves a
//! screenshot and says what the page showed.

use super::cluster::free_port_block;
use super::wait_until;
use base64::Engine;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where a browser test's screenshots go.
pub fn screenshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots")
}

/// How long a wait in the page may take before the test fails. Waits for the cluster itself
/// (a drain, a split) poll its HTTP API under their own, longer deadlines, and then check the
/// page with this one.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(20);

/// Attempts of a click or a typing whose element the page replaced meanwhile.
const STALE_ATTEMPTS: usize = 5;

/// WebDriver's name for an element reference in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The processes a [`Browser`] started, stopped by their PIDs when it goes: made as soon as
/// chromium runs, so a start that fails half way (no DevTools port, no driver) stops it too.
struct Started {
    chromium: Child,
    driver: Option<Child>,
}

impl Drop for Started {
    /// Stops chromedriver, then chromium (SIGTERM, so it takes its helper processes with it;
    /// SIGKILL if it has not gone within 5 s), both by the PIDs this test started.
    fn drop(&mut self) {
        if let Some(driver) = &mut self.driver {
            let _ = driver.kill();
            let _ = driver.wait();
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.chromium.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.chromium.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.chromium.kill();
        let _ = self.chromium.wait();
    }
}

/// A headless chromium and the chromedriver session on it.
pub struct Browser {
    /// Dropped first: the processes stop before their profile directory goes.
    _started: Started,
    _profile: tempfile::TempDir,
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    /// A prefix for screenshot names (the test's).
    name: String,
}

impl Browser {
    /// Starts chromium and chromedriver; `name` prefixes the screenshots.
    pub async fn start(name: &str) -> Browser {
        for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            assert!(
                std::path::Path::new(program).exists(),
                "{program} is missing: run scripts/install-test-deps.sh"
            );
        }
        let profile = tempfile::tempdir().expect("a profile directory");
        let log = std::fs::File::create(profile.path().join("chromium.log")).expect("log file");
        let chromium = Command::new("/usr/bin/chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
            ])
            .arg(format!(
                "--user-data-dir={}",
                profile.path().join("profile").display()
            ))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("chromium starts");
        // From here on, a failed assertion stops chromium on the way out.
        let mut started = Started {
            chromium,
            driver: None,
        };
        let port_file = profile.path().join("profile").join("DevToolsActivePort");
        let found = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(50),
            || async {
                std::fs::read_to_string(&port_file)
                    .ok()
                    .and_then(|t| t.lines().next().map(str::to_owned))
                    .is_some_and(|l| l.parse::<u16>().is_ok())
            },
        )
        .await;
        let log_path = profile.path().join("chromium.log");
        let browser_log = move || std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(found, "chromium gave no DevTools port:\n{}", browser_log());
        let devtools: u16 = std::fs::read_to_string(&port_file)
            .expect("port file")
            .lines()
            .next()
            .and_then(|l| l.parse().ok())
            .expect("a port");
        let driver_port = free_port_block(1);
        started.driver = Some(
            Command::new("/usr/bin/chromedriver")
                .arg(format!("--port={driver_port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts"),
        );
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let base = format!("http://127.0.0.1:{driver_port}");
        let ready = wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
            let http = http.clone();
            let url = format!("{base}/status");
            async move {
                match http.get(url).send().await {
                    Ok(r) => r
                        .json::<Value>()
                        .await
                        .is_ok_and(|v| v["value"]["ready"] == true),
                    Err(_) => false,
                }
            }
        })
        .await;
        let mut browser = Browser {
            _started: started,
            _profile: profile,
            http,
            session: String::new(),
            name: name.to_string(),
        };
        assert!(ready, "chromedriver did not become ready");
        let answer = browser
            .request(
                reqwest::Method::POST,
                &format!("{base}/session"),
                json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
                    "debuggerAddress": format!("127.0.0.1:{devtools}")
                }}}}),
            )
            .await
            .unwrap_or_else(|e| panic!("no WebDriver session: {e}\n{}", browser_log()));
        let id = answer["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        browser.session = format!("{base}/session/{id}");
        browser
    }

    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Value,
    ) -> Result<Value, String> {
        let mut request = self.http.request(method.clone(), url);
        if method != reqwest::Method::GET {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        let value: Value = response.json().await.map_err(|e| format!("{url}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{url}: {status}: {}", value["value"]));
        }
        Ok(value["value"].clone())
    }

    /// A command of this session: `path` after `/session/ID`.
    async fn command(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        match self.try_command(method, path, body).await {
            Ok(v) => v,
            Err(e) => {
                self.screenshot("failed-command").await;
                panic!("WebDriver: {e}");
            }
        }
    }

    async fn try_command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.session);
        self.request(method, &url, body).await
    }

    /// Finds the element `css` selects and sends it the commands `then` names (`click`,
    /// `clear`, ...), again from the start when the page replaced the element in between
    /// (WebDriver's "stale element reference": a table the page re-renders).
    async fn on_element(&self, css: &str, then: &[(&str, Value)]) {
        for attempt in 1..=STALE_ATTEMPTS {
            let id = self.find(css).await;
            let mut stale = false;
            for (what, body) in then {
                match self
                    .try_command(
                        reqwest::Method::POST,
                        &format!("/element/{id}/{what}"),
                        body.clone(),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.contains("stale element reference") && attempt < STALE_ATTEMPTS => {
                        stale = true;
                        break;
                    }
                    Err(e) => {
                        self.screenshot("failed-command").await;
                        panic!("WebDriver, {what} on {css}: {e}");
                    }
                }
            }
            if !stale {
                return;
            }
        }
    }

    /// Loads `url` as a new document (by way of a blank page, so an address that differs
    /// only in its `#fragment` loads afresh too) and waits until it has loaded.
    pub async fn goto(&self, url: &str) {
        for url in ["about:blank", url] {
            self.command(reqwest::Method::POST, "/url", json!({ "url": url }))
                .await;
        }
    }

    /// Runs `script` (a function body: `return ...`) in the page with `args`.
    pub async fn eval(&self, script: &str, args: Value) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// Runs `script` (a function body whose last argument is the callback to call with the
    /// result) in the page, waiting for it: for a promise, such as a module's `import()`.
    pub async fn eval_async(&self, script: &str, args: Value) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/async",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// Polls `script` until it returns something truthy (not false, null, 0 or ""), within
    /// [`PAGE_DEADLINE`]; returns that value. On a timeout: a screenshot named after `what`,
    /// and the page's text in the panic.
    pub async fn wait_for(&self, what: &str, script: &str) -> Value {
        self.wait_for_within(what, script, PAGE_DEADLINE).await
    }

    /// [`Browser::wait_for`] with another deadline.
    pub async fn wait_for_within(&self, what: &str, script: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let value = self.eval(script, json!([])).await;
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return value;
            }
            if Instant::now() >= deadline {
                let shot = self.screenshot(&format!("timeout-{what}")).await;
                let text = self.eval("return document.body.innerText", json!([])).await;
                panic!(
                    "the page did not show {what} within {within:?} (screenshot {}); it shows:\n{}",
                    shot.display(),
                    text.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The element `css` selects, waiting for it to be there.
    pub async fn find(&self, css: &str) -> String {
        let script = "return document.querySelector(arguments[0]) !== null";
        let deadline = Instant::now() + PAGE_DEADLINE;
        while self.eval(script, json!([css])).await != Value::Bool(true) {
            if Instant::now() >= deadline {
                self.screenshot("missing-element").await;
                panic!("no element {css} within {PAGE_DEADLINE:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let found = self
            .command(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found[ELEMENT].as_str().expect("an element").to_string()
    }

    /// Clicks the element `css` selects, as a user would (it must be visible).
    pub async fn click(&self, css: &str) {
        self.on_element(css, &[("click", json!({}))]).await;
    }

    /// Clears the field `css` selects and types `text` into it.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.on_element(
            css,
            &[("clear", json!({})), ("value", json!({ "text": text }))],
        )
        .await;
    }

    /// Presses keys on whatever has the focus, one after another (WebDriver key codes:
    /// `\u{E004}` Tab, `\u{E007}` Enter).
    pub async fn press(&self, keys: &[&str]) {
        let actions: Vec<Value> = keys
            .iter()
            .flat_map(|k| {
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        self.command(
            reqwest::Method::POST,
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}),
        )
        .await;
        self.command(reqwest::Method::DELETE, "/actions", json!({}))
            .await;
    }

    /// The text of the element `css` selects ("" when there is none).
    pub async fn text(&self, css: &str) -> String {
        let value = self
            .eval(
                "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''",
                json!([css]),
            )
            .await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// Saves a screenshot as `target/console-screenshots/<test>-<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = screenshot_dir();
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{}-{name}.png", self.name));
        let url = format!("{}/screenshot", self.session);
        if let Ok(Value::String(png)) = self.request(reqwest::Method::GET, &url, json!({})).await
            && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(png)
        {
            let _ = std::fs::write(&path, bytes);
        }
        path
    }
}

/// Form controls without a label: each one's id (or tag), for an assertion that every input
/// has one (a `<label for>`, an enclosing `<label>`, or `aria-label`/`aria-labelledby`).
pub const UNLABELLED_CONTROLS: &str = r#"
return [...document.querySelectorAll('input, select, textarea')]
  .filter((e) => e.type !== 'hidden' && e.offsetParent !== null)
  .filter((e) => !(e.id && document.querySelector(`label[for="${e.id}"]`))
    && !e.closest('label') && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby'))
  .map((e) => e.id || e.outerHTML.slice(0, 80));
"#;
