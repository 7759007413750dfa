"""Pure figure builders: BlockMaps, DataFrames -> plotly Figures. No streamlit here."""
