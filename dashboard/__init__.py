"""stepwatch dashboard (Streamlit): ``streamlit run dashboard/app.py``. Pages render; the store's questions
live in collector.store.queries and the statistics in collector.analysis."""
