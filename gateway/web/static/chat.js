// The web chat's live part: send without a reload, and show replies as they stream in.
// Without this script the page still works: forms post, and a reload shows the conversation.
"use strict";

(() => {
  const transcript = document.getElementById("transcript");
  const composer = document.getElementById("composer");
  if (!transcript || !composer) return;
  const textarea = composer.elements.text;
  const fileInput = composer.elements.file;
  const chosen = document.getElementById("chosen");
  const replies = new Map(); // id of the message answered -> its reply's element
  let order = 0;
  let retryMs = 1000;

  // Each message gets its own id, made here: the gateway takes an id in once, so a message can never
  // be dropped as a repeat of the one before (crypto.randomUUID needs https; this works on plain http).
  function newId() {
    return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function bubble(role, text, label) {
    const article = document.createElement("article");
    article.className = `msg role-${role}`;
    const who = document.createElement("header");
    who.className = "who";
    const speaker = document.createElement("span");
    speaker.className = "speaker";
    speaker.textContent = label;
    who.append(speaker);
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    article.append(who, body);
    article.dataset.order = String(order++);
    document.getElementById("empty")?.remove();
    transcript.append(article);
    return article;
  }

  // A sent message's files, as the page renders them (bubbles.html): an image from the chat's own /media/.
  function showItems(article, items) {
    if (!items.length) return;
    let box = article.querySelector(".items");
    if (!box) {
      box = document.createElement("div");
      box.className = "items";
      article.querySelector(".who").after(box);
    }
    for (const item of items) {
      const figure = document.createElement("figure");
      figure.className = `item kind-${item.kind}`;
      if (item.sha) {
        const link = document.createElement("a");
        link.href = `/media/${item.sha}`;
        const img = document.createElement("img");
        img.src = link.href;
        img.alt = item.name || item.kind;
        link.append(img);
        figure.append(link);
      }
      const caption = document.createElement("figcaption");
      const kind = item.sha ? "" : `${item.kind === "voice" ? "voice message" : item.kind} `;
      caption.textContent = `${kind}${item.name || item.kind}${item.about ? " " + item.about : ""}`;
      figure.append(caption);
      box.append(figure);
    }
  }

  function showChosen() {
    if (!chosen || !fileInput) return;
    const names = Array.from(fileInput.files, (file) => file.name);
    chosen.textContent = names.length ? `To send: ${names.join(", ")}` : "";
    chosen.hidden = !names.length;
  }

  function reply(id) {
    let element = replies.get(id);
    if (!element) {
      element = bubble("assistant", "", "foldgate");
      element.classList.add("working");
      replies.set(id, element);
    }
    return element;
  }

  function scrollDown() {
    window.scrollTo(0, document.body.scrollHeight);
  }

  async function send(text, files = []) {
    let body = new URLSearchParams({ text, nonce: newId() });
    if (files.length) {
      const form = new FormData();
      for (const [name, value] of body) form.append(name, value);
      for (const file of files) form.append("file", file, file.name);
      body = form;
    }
    const mine = bubble("user", text, "you");
    scrollDown();
    let response;
    try {
      response = await fetch("/send", { method: "POST", body, headers: { Accept: "application/json" }, credentials: "same-origin" });
    } catch (error) {
      mine.classList.add("failed");
      bubble("assistant", "⚠️ The message could not be sent (the gateway is not reachable). Send it again.", "foldgate");
      return;
    }
    if (!response.ok) {
      bubble("assistant", `⚠️ ${(await response.text()).trim()}`, "foldgate");
      return;
    }
    const answer = await response.json();
    showItems(mine, answer.items || []);
    if (!answer.queued) {
      bubble("assistant", "⚠️ This message was taken in already; it is not sent twice.", "foldgate");
      return;
    }
    reply(answer.update_id);
    scrollDown();
  }

  // A question the bot asks before it runs a tool: approve or refuse, sent as the page sends any message.
  function askApproval(element, event) {
    const box = document.createElement("div");
    box.className = "approval";
    box.dataset.approval = event.id;
    const question = document.createElement("p");
    question.textContent = event.question;
    box.append(question);
    for (const [label, command] of [["Approve", "approve"], ["Refuse", "refuse"]]) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = command;
      button.textContent = label;
      button.addEventListener("click", async () => {
        for (const other of box.querySelectorAll("button")) other.disabled = true;
        const body = new URLSearchParams({ text: `/${command} ${event.id}`, nonce: newId() });
        await fetch("/send", { method: "POST", body, headers: { Accept: "application/json" }, credentials: "same-origin" });
      });
      box.append(button);
    }
    element.querySelector(".text").before(box);
  }

  function settleApproval(event) {
    const box = document.querySelector(`.approval[data-approval="${event.id}"]`);
    if (!box) return;
    for (const button of box.querySelectorAll("button")) button.remove();
    const outcome = document.createElement("p");
    outcome.className = "outcome";
    outcome.textContent = `→ ${event.outcome}`;
    box.append(outcome);
  }

  function shown(event) {
    if (event.type === "approval_settled") {
      settleApproval(event);
      return;
    }
    const element = reply(event.reply_to || "");
    if (event.type === "approval") {
      askApproval(element, event);
      element.classList.remove("working");
      scrollDown();
      return;
    }
    if (event.type === "file") {  // an image or file the reply carries, after its text
      showItems(element, [event]);
      element.classList.remove("working");
      scrollDown();
      return;
    }
    element.querySelector(".text").textContent = event.text;
    element.classList.remove("working");
    element.classList.toggle("streaming", event.type === "preview");
    if (event.type === "final") {
      element.dataset.done = "1";
      // Messages sent while an earlier turn ran are answered together: their placeholders go.
      for (const [id, other] of replies) {
        if (other !== element && !other.dataset.done && Number(other.dataset.order) < Number(element.dataset.order)) {
          other.remove();
          replies.delete(id);
        }
      }
    }
    scrollDown();
  }

  function connect(again) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(`${scheme}${location.host}/live`);
    socket.addEventListener("open", () => {
      retryMs = 1000;
      // Replies written while the page was not listening are in the conversation as stored.
      if (again && [...replies.values()].some((element) => !element.dataset.done)) location.reload();
    });
    socket.addEventListener("message", (message) => shown(JSON.parse(message.data)));
    socket.addEventListener("close", () => {
      setTimeout(() => connect(true), retryMs);
      retryMs = Math.min(retryMs * 2, 30000);
    });
  }

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = textarea.value.trim();
    const files = fileInput ? Array.from(fileInput.files) : [];
    if (!text && !files.length) return;
    textarea.value = "";
    if (fileInput) fileInput.value = "";
    showChosen();
    send(text, files);
  });
  // Files dropped anywhere on the chat go with the next message (as if chosen in the file input).
  if (fileInput) {
    fileInput.addEventListener("change", showChosen);
    const carriesFiles = (event) => event.dataTransfer && Array.from(event.dataTransfer.types).includes("Files");
    document.addEventListener("dragover", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      document.body.classList.add("dropping");
    });
    document.addEventListener("dragleave", (event) => {
      if (!event.relatedTarget) document.body.classList.remove("dropping");
    });
    document.addEventListener("drop", (event) => {
      document.body.classList.remove("dropping");
      if (!carriesFiles(event)) return;
      event.preventDefault();
      fileInput.files = event.dataTransfer.files;
      showChosen();
      textarea.focus();
    });
  }
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });
  for (const form of document.querySelectorAll("form.command")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      send(form.elements.text.value);
    });
  }
  connect(false);
  scrollDown();
})();
